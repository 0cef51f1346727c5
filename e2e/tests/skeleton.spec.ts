import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, test } from '@playwright/test';
import {
  anyApprovalGroup,
  approvalGroup,
  expectFinalText,
  login,
  newSession,
  normalise,
  send,
  stopButton,
  toolCard,
  transcript,
  workspace,
} from './helpers';

// The walking skeleton: one session per test, faux models only, every wait on visible state.
// Scripts: `faux:demo` ships in the binary; `faux:deny` and `faux:exit3` come from e2e/scripts.

const DEMO_ECHO = 'Countersign demo: listing the workspace';

// Status words are matched on the rendered text (innerText), where separate blocks stay separate
// words; textContent would glue "approved by owner" to the output that follows it.

test.beforeEach(async ({ page }) => {
  await login(page);
});

test('demo: read_file runs without approval, run_command runs after Approve', async ({ page }) => {
  await newSession(page, 'demo approve flow', 'faux:demo');
  await send(page, 'Show me what is in the workspace.');

  // read_file is read-only: its result shows up and it never asks for approval.
  const readCard = toolCard(page, 'read_file');
  await expect(readCard).toContainText('Countersign e2e workspace');
  await expect(readCard).toHaveAttribute('data-tool-call-id', /.+/);
  await expect(anyApprovalGroup(readCard)).toHaveCount(0);

  // run_command has no annotations, so it waits for the owner.
  const runCard = toolCard(page, 'run_command');
  const approval = approvalGroup(runCard, 'run_command');
  await expect(approval).toBeVisible();
  await expect(runCard).toHaveAttribute('data-tool-call-id', /.+/);
  for (const name of ['Approve', 'Approve for session', 'Deny', 'Edit']) {
    await expect(approval.getByRole('button', { name, exact: true })).toBeVisible();
  }
  await expect(approval.getByRole('textbox', { name: 'Reason', exact: true })).toBeVisible();
  await expect(stopButton(page)).toBeVisible();

  await approval.getByRole('button', { name: 'Approve', exact: true }).click();

  await expect(approval).toBeHidden();
  // The command's stdout: the echoed line, then `ls -1` of the workspace.
  await expect(runCard).toContainText(new RegExp(`${DEMO_ECHO}\\s+README\\.md`));
  await expectFinalText(page, 'exit code 0');
  await expect(runCard).toContainText(/\bapproved\b/i, { useInnerText: true });
  await expect(runCard).toContainText(/\bowner\b/, { useInnerText: true });
});

test('deny: the reason reaches the model and the command never runs', async ({ page }) => {
  await newSession(page, 'deny with reason', 'faux:deny');
  await send(page, 'Create the marker file.');

  const runCard = toolCard(page, 'run_command');
  const approval = approvalGroup(runCard, 'run_command');
  await expect(approval).toBeVisible();
  await approval.getByRole('textbox', { name: 'Reason', exact: true }).fill('not now');
  await approval.getByRole('button', { name: 'Deny', exact: true }).click();

  await expect(approval).toBeHidden();
  await expect(runCard).toContainText('Denied by owner: not now');
  await expectFinalText(page, 'Understood, I did not run it.');
  await expect(runCard).toContainText(/\bdenied\b/i, { useInnerText: true });
  await expect(runCard).toContainText(/\bowner\b/, { useInnerText: true });
  expect(fs.existsSync(path.join(workspace, 'denied-marker.txt'))).toBe(false);
});

test('reload: a pending approval survives a reload, and the transcript renders the same from the store', async ({ page }) => {
  await newSession(page, 'reload while pending', 'faux:demo');
  await send(page, 'Show me what is in the workspace.');

  const runCard = toolCard(page, 'run_command');
  const approval = approvalGroup(runCard, 'run_command');
  await expect(approval).toBeVisible();

  await page.reload();
  await expect(approval).toBeVisible();
  await expect(toolCard(page, 'read_file')).toContainText('Countersign e2e workspace');

  await approval.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(approval).toBeHidden();
  await expect(runCard).toContainText(new RegExp(`${DEMO_ECHO}\\s+README\\.md`));
  await expectFinalText(page, 'exit code 0');
  await expect(runCard).toContainText(/\bapproved\b/i, { useInnerText: true });

  // What the live updates built must match the first render of the same transcript.
  const live = normalise(await transcript(page).innerText());
  await page.reload();
  await expect(page.getByRole('textbox', { name: 'Message', exact: true })).toBeVisible();
  await expect.poll(async () => normalise(await transcript(page).innerText())).toBe(live);
});

test('exit 3: a non-zero exit is data, not an error', async ({ page }) => {
  await newSession(page, 'exit code 3', 'faux:exit3');
  await send(page, 'Run the failing command.');

  const runCard = toolCard(page, 'run_command');
  const approval = approvalGroup(runCard, 'run_command');
  await expect(approval).toBeVisible();
  await approval.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(approval).toBeHidden();

  // structuredContent, shown as formatted JSON.
  await expect(runCard).toContainText(/"exitCode":\s*3\b/);
  await expect(runCard).toContainText(/"stdout":\s*"out\\n"/);
  await expect(runCard).toContainText(/"stderr":\s*"err\\n"/);
  await expect(runCard.locator('.tool-body')).toHaveAttribute('data-is-error', 'false');
  await expect(runCard).not.toContainText(/isError"?:\s*true/);
  await expectFinalText(page, 'It exited with 3.');
  await expect(runCard).toContainText(/\bapproved\b/i, { useInnerText: true });
  await expect(runCard).toContainText(/\bowner\b/, { useInnerText: true });
});

// SPEC §3: every open page of the session updates to the final state within a second.
test('two pages of one session see the same approval, and the second updates when the first decides', async ({ page, context }) => {
  await newSession(page, 'two pages', 'faux:demo');
  const other = await context.newPage();
  await other.goto(page.url());
  await expect(other.getByRole('textbox', { name: 'Message', exact: true })).toBeVisible();

  await send(page, 'Show me what is in the workspace.');
  const approval = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  const otherApproval = approvalGroup(toolCard(other, 'run_command'), 'run_command');
  await expect(approval).toBeVisible();
  await expect(otherApproval).toBeVisible();

  await otherApproval.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(approval).toBeHidden({ timeout: 1_000 });
  await expect(toolCard(page, 'run_command')).toContainText(/\bapproved\b/i, { useInnerText: true });
  await expect(toolCard(page, 'run_command').getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  await expectFinalText(page, 'exit code 0');
  await expectFinalText(other, 'exit code 0');
});
