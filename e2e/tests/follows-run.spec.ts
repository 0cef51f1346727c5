import { test, expect, type Locator, type Page } from '@playwright/test';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { OWNER_TOKEN, approvalGroup, expectFinalText, login, newSession, send, toolCard, transcript } from './helpers';

// Issue 16, item 2: the page follows the run. The faux script follow has three runs: a long
// first one (two steps of 30 lines and a tool call each), a second one of text only, and a third
// that asks to run a command.

const shots = path.resolve(__dirname, '../screenshots');

/** Sends a message through the JSON API, as another client would, while the page only watches. */
async function sendByAPI(page: Page, sessionId: string, text: string): Promise<void> {
  const res = await page.request.post(`/api/sessions/${sessionId}/messages`, {
    headers: { Authorization: `Bearer ${OWNER_TOKEN}` },
    data: { text },
  });
  expect(res.status()).toBe(202);
}

/** The transcript's end shows above the message box (which sticks to the viewport's bottom). */
async function endInView(page: Page): Promise<boolean> {
  return page.evaluate(() => {
    const bottom = document.getElementById('transcript')!.getBoundingClientRect().bottom;
    const box = document.querySelector('.composer');
    const free = box ? Math.min(window.innerHeight, box.getBoundingClientRect().top) : window.innerHeight;
    return bottom > 0 && bottom <= free + 1;
  });
}

/** Nothing covers loc's centre (without scrolling first: it must already be in view). */
async function uncovered(loc: Locator): Promise<boolean> {
  return loc.evaluate((el) => {
    const r = el.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (y < 0 || y > window.innerHeight) return false;
    const hit = document.elementFromPoint(x, y);
    return !!hit && (hit === el || el.contains(hit));
  });
}

test('item 2, the page follows the run: the end stays in view, "New activity ↓" and "Approval waiting" when scrolled up', async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await login(page);
  const id = await newSession(page, 'follow the run', 'faux:follow');

  // At the end: new content keeps the end in view.
  await send(page, 'Work through it.');
  await expectFinalText(page, 'First run done.');
  await expect(page.getByText('First run done.')).toBeInViewport();
  await expect.poll(() => endInView(page)).toBe(true);
  const newActivity = page.getByRole('button', { name: 'New activity ↓', exact: true });
  await expect(newActivity).toBeHidden();

  // Scrolled up: nothing moves; a button says there is more.
  await page.mouse.move(400, 400);
  await page.mouse.wheel(0, -20000);
  await expect.poll(() => page.evaluate(() => window.scrollY)).toBe(0);
  await sendByAPI(page, id, 'More, please.');
  await expect(newActivity).toBeVisible();
  await expect(transcript(page)).toContainText('Second run done.');
  expect(await page.evaluate(() => window.scrollY)).toBe(0);
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, 'item2-new-activity-1280.png') });
  await newActivity.click();
  await expect(page.getByText('Second run done.')).toBeInViewport();
  await expect.poll(() => endInView(page)).toBe(true);
  await expect(newActivity).toBeHidden();

  // Scrolled up again, a prompt arrives: a sticky bar says so and jumps to it.
  await page.mouse.wheel(0, -20000);
  await expect.poll(() => page.evaluate(() => window.scrollY)).toBe(0);
  await sendByAPI(page, id, 'And the command.');
  const waiting = page.getByRole('button', { name: 'Approval waiting: run_command ↓', exact: true });
  await expect(waiting).toBeVisible();
  const group = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  await expect(group).toBeAttached();
  await expect(group).not.toBeInViewport();
  expect(await page.evaluate(() => window.scrollY)).toBe(0);
  await page.screenshot({ path: path.join(shots, 'item2-approval-waiting-1280.png') });
  await waiting.click();
  const approve = group.getByRole('button', { name: 'Approve', exact: true });
  await expect(approve).toBeInViewport();
  expect(await uncovered(approve)).toBe(true);
  await expect(waiting).toBeHidden();
  await approve.click();
  await expectFinalText(page, 'Third run done: followed');
  await expect(page.getByText('Third run done: followed')).toBeInViewport();
});

test('item 2, the page follows the run: a prompt arriving while the reader follows is scrolled into view above the message box (390 px)', async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await login(page);
  await newSession(page, 'prompt on a phone', 'faux:edit');
  await send(page, 'Fix the second line.');
  const group = approvalGroup(toolCard(page, 'write_file'), 'write_file');
  const approve = group.getByRole('button', { name: 'Approve', exact: true });
  await expect(approve).toBeInViewport();
  await expect.poll(() => uncovered(approve)).toBe(true);
  await expect(page.getByRole('button', { name: /^Approval waiting/ })).toBeHidden();
  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(toolCard(page, 'write_file')).toContainText('denied by owner');
});

test('item 2, the page follows the run: at 390 px opening Edit keeps Approve visible, clear of the message box', async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await login(page);
  await newSession(page, 'edit on a phone', 'faux:edit');
  await send(page, 'Fix the second line.');
  const group = approvalGroup(toolCard(page, 'write_file'), 'write_file');
  const approve = group.getByRole('button', { name: 'Approve', exact: true });
  await expect(group).toBeVisible();
  // The reader has the prompt's buttons just above the message box, as following leaves them.
  await group.locator('.approval-buttons').evaluate((el) => {
    const box = document.querySelector('.composer')!.getBoundingClientRect();
    const top = Math.min(window.innerHeight, box.top);
    window.scrollBy(0, el.getBoundingClientRect().bottom - (top - 10));
  });
  await expect.poll(() => uncovered(approve)).toBe(true);

  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  await expect(group.getByRole('textbox', { name: 'Content', exact: true })).toBeVisible();
  await expect(group.getByRole('textbox', { name: 'Arguments', exact: true })).toBeVisible();
  await expect(approve).toBeInViewport();
  await expect.poll(() => uncovered(approve)).toBe(true);
  // Opening Edit is not activity of the run.
  await expect(page.getByRole('button', { name: 'New activity ↓', exact: true })).toBeHidden();
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, 'item2-edit-open-390.png') });
  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(toolCard(page, 'write_file')).toContainText('denied by owner');
});
