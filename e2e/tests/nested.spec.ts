import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, workspace } from './helpers';

// SPEC §4: nested calls are gated like direct ones, shown inside their parent's card.

test('codemode: two nested write_file prompts name codemode; approve one, deny the other', async ({ page }) => {
  await login(page);
  await newSession(page, 'codemode', 'faux:codemode');
  // codemode is inactive until activated.
  const box = page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'codemode', exact: true });
  await expect(box).not.toBeChecked();
  await box.check();
  await expect(page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'codemode', exact: true })).toBeChecked();

  await send(page, 'Write the two files with a script.');
  const parent = toolCard(page, 'codemode');
  const nestedPrompt = approvalGroup(parent, 'write_file');
  await expect(nestedPrompt).toHaveCount(1);
  await expect(nestedPrompt).toContainText('requested by codemode · call cm1');
  await nestedPrompt.getByRole('button', { name: 'Approve', exact: true }).click();

  // The second prompt is a separate one, for the second call.
  const second = parent.locator('[data-tool-call-id="cm1/2"]');
  await expect(approvalGroup(second, 'write_file')).toBeVisible();
  await expect(approvalGroup(second, 'write_file')).toContainText('requested by codemode · call cm1');
  await approvalGroup(second, 'write_file').getByRole('textbox', { name: 'Reason', exact: true }).fill('only one file');
  await approvalGroup(second, 'write_file').getByRole('button', { name: 'Deny', exact: true }).click();

  await expectFinalText(page, 'The script said: second failed: Denied by owner: only one file');
  expect(fs.readFileSync(path.join(workspace, 'codemode/first.txt'), 'utf8')).toBe('first\n');
  expect(fs.existsSync(path.join(workspace, 'codemode/second.txt'))).toBe(false);
  // Both nested calls show under the parent, live and after a reload (from nestedCalls).
  for (const p of [false, true]) {
    if (p) await page.reload();
    const card = toolCard(page, 'codemode');
    await expect(card.locator('[data-tool-call-id="cm1/1"]')).toContainText('write_file');
    await expect(card.locator('[data-tool-call-id="cm1/2"]')).toContainText('Denied by owner: only one file');
    await expect(card).toContainText('second call threw');
  }
  fs.mkdirSync(path.resolve(__dirname, '../screenshots'), { recursive: true });
  await page.setViewportSize({ width: 1400, height: 1000 });
  await page.screenshot({ path: path.resolve(__dirname, '../screenshots/finished-run-with-nested-calls.png'), fullPage: true });
});

// Issue 15, item 9: run_checks and failing_tests run the workspace's code, so inside review_diff
// (the demo's second message) each shows a nested prompt; git_diff, read-only, does not ask.
test('demo: review_diff shows nested prompts for run_checks and failing_tests; approve one, deny the other', async ({ page }) => {
  await login(page);
  await newSession(page, 'demo review', 'faux:demo');
  await send(page, 'Show me what is in the workspace.');
  const run = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  await run.getByRole('button', { name: 'Approve', exact: true }).click();
  await expectFinalText(page, 'exit code 0');

  await send(page, 'Review the diff.');
  const card = toolCard(page, 'review_diff');
  const checks = approvalGroup(card, 'run_checks');
  await expect(checks).toBeVisible();
  await expect(checks).toContainText('requested by review_diff · call demo-review');
  // git_diff ran before, without a prompt of its own.
  const diffCall = card.locator('[data-tool-call-id="demo-review/1"]');
  await expect(diffCall).toContainText('git_diff');
  await expect(approvalGroup(diffCall, 'git_diff')).toHaveCount(0);
  // review_diff itself did not ask.
  await expect(approvalGroup(card, 'review_diff')).toHaveCount(0);
  await checks.getByRole('button', { name: 'Approve', exact: true }).click();

  const tests = approvalGroup(card, 'failing_tests');
  await expect(tests).toBeVisible();
  await expect(tests).toContainText('requested by review_diff · call demo-review');
  await tests.getByRole('textbox', { name: 'Reason', exact: true }).fill('not the tests now');
  await tests.getByRole('button', { name: 'Deny', exact: true }).click();

  await expectFinalText(page, 'Review verdict: incomplete');
  await expect(card.locator('[data-tool-call-id="demo-review/3"]')).toContainText('Denied by owner: not the tests now');
  await page.reload();
  await expect(toolCard(page, 'review_diff').locator('[data-tool-call-id="demo-review/3"]')).toContainText('Denied by owner: not the tests now');
});
