import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, workspace } from './helpers';

// Issue 16, item 8: Edit is an editor. The faux script editor asks to write_file
// editor-notes.txt with its second line in capitals.

const shots = path.resolve(__dirname, '../screenshots');

test('item 8, Edit is an editor: write_file content is edited as text, the diff follows the typing, the edit runs and is audited', async ({ page }) => {
  const target = path.join(workspace, 'editor-notes.txt');
  fs.writeFileSync(target, 'first line\nsecond line\nthird line\n');
  await page.setViewportSize({ width: 1280, height: 800 });
  await login(page);
  await newSession(page, 'edit as text', 'faux:editor');
  await send(page, 'Make it louder.');
  const card = toolCard(page, 'write_file');
  const group = approvalGroup(card, 'write_file');
  await expect(group).toBeVisible();
  await expect(card.locator('tr.diff-add')).toContainText('SECOND LINE');

  const content = group.getByRole('textbox', { name: 'Content', exact: true });
  const filePath = group.getByRole('textbox', { name: 'Path', exact: true });
  await expect(content).toBeHidden();
  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  // The file's text with real line breaks, not a JSON string with \n.
  await expect(content).toHaveValue('first line\nSECOND LINE\nthird line\n');
  await expect(filePath).toHaveValue('editor-notes.txt');
  expect(await content.evaluate((el) => getComputedStyle(el).fontFamily)).toMatch(/monospace/);
  // The JSON is there too, in step, in the monospace textbox "Arguments" (SPEC §6).
  const args = group.getByRole('textbox', { name: 'Arguments', exact: true });
  await expect(args).toHaveValue(/"content": "first line\\nSECOND LINE\\nthird line\\n"/);
  expect(await args.evaluate((el) => getComputedStyle(el).fontFamily)).toMatch(/monospace/);

  // Typing changes the diff, without submitting anything.
  await content.press('ControlOrMeta+End');
  await content.pressSequentially('fourth line, by a person');
  await expect(card.locator('tr.diff-add', { hasText: 'fourth line, by a person' })).toBeVisible();
  await expect(group).toContainText('Preview of your edit');
  await expect(args).toHaveValue(/third line\\nfourth line, by a person"/);
  expect(fs.readFileSync(target, 'utf8')).toBe('first line\nsecond line\nthird line\n');
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, 'item8-edit-as-text-1280.png'), fullPage: true });

  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expectFinalText(page, 'Written:');
  expect(fs.readFileSync(target, 'utf8')).toBe('first line\nSECOND LINE\nthird line\nfourth line, by a person');
  await expect(card).toContainText('approved by owner with edited arguments');
  await expect(card.locator('tr.diff-add', { hasText: 'fourth line, by a person' })).toBeVisible();

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const row = page.getByRole('row').filter({ hasText: 'write_file' });
  await expect(row).toContainText('as asked');
  await expect(row).toContainText('as approved');
  await expect(row).toContainText('fourth line, by a person');
});

test('item 8, Edit is an editor: a run_command edit previews the exact command; what Approve would refuse shows while typing', async ({ page }) => {
  await login(page);
  await newSession(page, 'edit a command', 'faux:deny');
  await send(page, 'Make the marker.');
  const card = toolCard(page, 'run_command');
  const group = approvalGroup(card, 'run_command');
  await expect(group).toBeVisible();
  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  const args = group.getByRole('textbox', { name: 'Arguments', exact: true });
  expect(await args.evaluate((el) => getComputedStyle(el).fontFamily)).toMatch(/monospace/);
  await args.fill('{"command": "echo previewed > /dev/null"}');
  await expect(card.getByLabel('Command', { exact: true })).toHaveText('$ echo previewed > /dev/null');
  await args.fill('{"command": 42}');
  await expect(group).toContainText('Approve will refuse this');
  await expect(group.getByRole('alert')).toHaveCount(0);
  // Cancel puts back the call as asked.
  await group.getByRole('button', { name: 'Cancel edit', exact: true }).click();
  await expect(card.getByLabel('Command', { exact: true })).toHaveText('$ echo created > denied-marker.txt');
  await expect(group).not.toContainText('Preview of your edit');
  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(card).toContainText('denied by owner');
});
