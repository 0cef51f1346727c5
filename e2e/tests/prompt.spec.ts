import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, transcript, workspace } from './helpers';

// SPEC §3 "What a prompt shows" and §6 rendering: diffs, exact commands, edit before approve,
// sanitised Markdown.

const shots = path.resolve(__dirname, '../screenshots');

test('a write_file prompt shows the diff; an invalid edit is refused; a valid edit runs and the audit keeps both', async ({ page }) => {
  const target = path.join(workspace, 'edit-target.txt');
  fs.writeFileSync(target, 'alpha\nbeta\ngamma\n');
  await page.setViewportSize({ width: 1400, height: 1000 });
  await login(page);
  await newSession(page, 'edit before approve', 'faux:edit');
  await send(page, 'Fix the second line.');
  const card = toolCard(page, 'write_file');
  const group = approvalGroup(card, 'write_file');
  await expect(group).toBeVisible();
  // The diff against the file's current content: one removed and one added line.
  await expect(card.locator('tr.diff-del')).toContainText('beta');
  await expect(card.locator('tr.diff-add')).toContainText('BETA');
  await expect(card.locator('tr.diff-del')).toBeVisible();
  await expect(card.locator('tr.diff-add')).toBeVisible();
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, 'pending-prompt-with-diff.png'), fullPage: true });

  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  // write_file's content is edited as text (issue 16, item 8); the JSON textbox "Arguments"
  // (SPEC §6) is there too, without another click.
  const args = group.getByRole('textbox', { name: 'Arguments', exact: true });
  await expect(args).toHaveValue(/"content": "alpha\\nBETA\\ngamma\\n"/);
  await args.fill('{"path": "edit-target.txt"}');
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(group.getByRole('alert')).toContainText("missing property 'content'");
  await expect(group).toBeVisible();
  expect(fs.readFileSync(target, 'utf8')).toBe('alpha\nbeta\ngamma\n');

  await args.fill('{"path": "edit-target.txt", "content": "alpha\\nedited by a person\\ngamma\\n"}');
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expectFinalText(page, 'Written:');
  expect(fs.readFileSync(target, 'utf8')).toBe('alpha\nedited by a person\ngamma\n');
  await expect(card).toContainText('approved by owner with edited arguments');
  // The card shows what ran.
  await expect(card.locator('tr.diff-add', { hasText: 'edited by a person' })).toBeVisible();
  await expect(card.locator('tr.diff-del', { hasText: 'beta' })).toBeVisible();

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const row = page.getByRole('row').filter({ hasText: 'write_file' });
  await expect(row).toContainText('as asked');
  await expect(row).toContainText('BETA');
  await expect(row).toContainText('as approved');
  await expect(row).toContainText('edited by a person');
});

test('a run_command prompt shows the exact command', async ({ page }) => {
  await login(page);
  await newSession(page, 'exact command', 'faux:deny');
  await send(page, 'Make the marker.');
  const card = toolCard(page, 'run_command');
  await expect(approvalGroup(card, 'run_command')).toBeVisible();
  await expect(card.getByLabel('Command', { exact: true })).toHaveText('$ echo created > denied-marker.txt');
});

test('assistant Markdown renders formatted, highlighted and inert', async ({ page }) => {
  let dialogs = 0;
  page.on('dialog', (d) => { dialogs++; void d.dismiss(); });
  await login(page);
  await newSession(page, 'markdown', 'faux:markdown');
  await send(page, 'Summarise.');
  const log = transcript(page);
  await expect(log.locator('table')).toContainText('1 failure');
  await expect(log.locator('h2')).toHaveText('Findings');
  await expect(log.locator('pre.chroma')).toContainText('fmt.Println');
  await expect(log.locator('pre.chroma span[class]').first()).toBeVisible();
  await expect(log.locator('script')).toHaveCount(0);
  await expect(log.locator('img')).toHaveCount(0);
  await expect(log.getByRole('link', { name: 'safe link' })).toHaveAttribute('href', 'https://example.com');
  await expect(log.locator('a[href^="javascript"]')).toHaveCount(0);
  await page.reload();
  await expect(transcript(page).locator('table')).toContainText('1 failure');
  expect(dialogs).toBe(0);
});
