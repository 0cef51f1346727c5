import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { test, expect, type Locator, type Page } from '@playwright/test';
import { approvalGroup, expectFinalText, loginAt, newSession, send, startOwnServer, toolCard, type OwnServer } from './helpers';

// Issue 28 (SPEC §14 "Rules judge the action, not the text"), acceptance 3 and 8 in the browser:
// what the person sees is what is written, and their approval binds what they saw.
//
// A write_file whose path and content hold U+202E (right-to-left override) and U+2066 (left-to-
// right isolate) shows each of them as a marked code point where it is, in the path and in the
// diff's lines, with a warning above Approve, on the live prompt, the reloaded page, the inbox
// and a decision link's page, at 1280 and 390 px. `sh job.sh` shows job.sh with its digest, and
// when job.sh changes while the prompt waits, Approve runs nothing and the card says why.
//
// A server of this file's own (port 0), with a webhook receiver here for the decision link: the
// inbox must hold only this file's prompts. Screenshots go to $E2E_SHOTS (default
// e2e/screenshots).

const shots = process.env.E2E_SHOTS || path.resolve(__dirname, '../screenshots');

/** The path as written, and as the prompt must show it. */
const PATH = 'role\u202eog.txt';
const PATH_SHOWN = 'role<U+202E>og.txt';
const LINE_SHOWN = 'if access != "user<U+202E> <U+2066>// Check if admin<U+2069> <U+2066>" {';
const WARNING = 'This path and content contain invisible or bidirectional characters, marked below like <U+202E>: what you see may not be what is written.';

let srv: OwnServer;
let hook: http.Server;
let requested: any[] = [];

test.describe.configure({ mode: 'default' });

test.beforeAll(async ({}, info) => {
  hook = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const ev = JSON.parse(body);
      if (ev.type === 'approval.requested') requested.push(ev);
      res.end();
    });
  });
  await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
  const name = `reveal-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  srv = await startOwnServer(name, 0, ['-notify-webhook', `alice=http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`]);
  fs.mkdirSync(shots, { recursive: true });
});

test.afterAll(async () => {
  await srv?.kill();
  await new Promise<void>((resolve) => (hook ? hook.close(() => resolve()) : resolve()));
});

/** What sideways overflow a page has: the page's own, and any prompt wider than its box. */
async function overflow(page: Page): Promise<{ page: number; blocks: string[] }> {
  return page.evaluate(() => {
    const root = document.scrollingElement!;
    const blocks: string[] = [];
    document.querySelectorAll('.approval, .file-diff, .tool-card').forEach((el) => {
      if (el.scrollWidth > el.clientWidth + 1) blocks.push(`${el.className} ${el.scrollWidth}>${el.clientWidth}`);
    });
    return { page: root.scrollWidth - root.clientWidth, blocks };
  });
}

/**
 * The write_file prompt `group` shows the path and the Trojan Source line with every hidden
 * character marked, carries none of them raw, and warns above Approve.
 */
async function expectRevealed(group: Locator): Promise<void> {
  await expect(group).toBeVisible();
  const warning = group.getByRole('alert').filter({ hasText: 'invisible or bidirectional' });
  await expect(warning).toHaveText(WARNING);
  await expect(group.locator('.diff-title code')).toHaveText(PATH_SHOWN);
  await expect(group.locator('td.diff-text', { hasText: 'Check if admin' })).toContainText(LINE_SHOWN);
  // Each hidden character is its own highlighted mark: one in the path, four in the line.
  await expect(group.locator('mark.hidden-char')).toHaveText(['<U+202E>', '<U+202E>', '<U+2066>', '<U+2069>', '<U+2066>']);
  const text = await group.evaluate((el) => (el as HTMLElement).innerText);
  expect(text, 'no hidden character reaches the screen raw').not.toMatch(/[\u202a-\u202e\u2066-\u2069]/);
  // Above the buttons.
  const approve = group.getByRole('button', { name: 'Approve', exact: true });
  await expect(approve).toBeVisible();
  const w = (await warning.boundingBox())!;
  const a = (await approve.boundingBox())!;
  expect(w.y + w.height, 'the warning ends above Approve').toBeLessThanOrEqual(a.y);
}

test('acceptance 3: a write_file whose path and content hold U+202E and U+2066 shows them marked with a warning above Approve — live, reloaded, inbox and decision link, at 1280 and 390 px', async ({ page, browser }) => {
  await page.setViewportSize({ width: 1280, height: 900 });
  await loginAt(page, srv.baseURL);
  const sid = await newSession(page, 'Trojan source', 'faux:trojan');
  await send(page, 'Add the role check.');
  const card = toolCard(page, 'write_file');
  const group = approvalGroup(card, 'write_file');

  // The live prompt.
  await expectRevealed(group);
  expect(await overflow(page)).toEqual({ page: 0, blocks: [] });
  await card.screenshot({ path: path.join(shots, 'write-file-live-1280.png') });

  // The reloaded page: the same, from the store.
  await page.reload();
  await expectRevealed(group);
  await card.screenshot({ path: path.join(shots, 'write-file-reloaded-1280.png') });

  // 390 px (a phone): still marked and warned, nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  await expectRevealed(group);
  await expect.poll(() => overflow(page)).toEqual({ page: 0, blocks: [] });
  await group.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(shots, 'write-file-session-390.png') });
  await card.screenshot({ path: path.join(shots, 'write-file-card-390.png') });

  // The inbox, at both widths.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(srv.baseURL + '/inbox');
  const inboxGroup = approvalGroup(page.locator('#inbox-list > .inbox-card').first(), 'write_file');
  await expectRevealed(inboxGroup);
  await page.screenshot({ path: path.join(shots, 'write-file-inbox-1280.png') });
  await page.setViewportSize({ width: 390, height: 844 });
  await expectRevealed(inboxGroup);
  await expect.poll(() => overflow(page)).toEqual({ page: 0, blocks: [] });
  await page.screenshot({ path: path.join(shots, 'write-file-inbox-390.png'), fullPage: true });

  // The decision link's page, on a phone with no login.
  await expect.poll(() => requested.filter((e) => e.data.session.id === sid).length).toBe(1);
  const link: string = requested.find((e) => e.data.session.id === sid).data.links.decision;
  const phoneCtx = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const phone = await phoneCtx.newPage();
  await phone.goto(link);
  const phoneGroup = phone.getByRole('group', { name: 'Approval required: write_file', exact: true });
  await expectRevealed(phoneGroup);
  await expect.poll(() => overflow(phone)).toEqual({ page: 0, blocks: [] });
  await phone.screenshot({ path: path.join(shots, 'write-file-decision-390.png'), fullPage: true });

  // Approved there, it writes exactly the file whose name was shown marked.
  await phoneGroup.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(phone.getByRole('status')).toContainText('approved by alice');
  await phoneCtx.close();
  await page.goto(`${srv.baseURL}/sessions/${sid}`);
  await expectFinalText(page, 'Result: Created');
  expect(fs.readFileSync(path.join(srv.workspace, PATH), 'utf8')).toContain('"user\u202e \u2066// Check if admin\u2069 \u2066"');
});

test('acceptance 8: sh job.sh shows job.sh with its digest; changed while the prompt waits, Approve runs nothing and the card says why', async ({ page }) => {
  const job = path.join(srv.workspace, 'job.sh');
  const ran = path.join(srv.workspace, 'job-ran.txt');
  fs.rmSync(ran, { force: true });
  fs.writeFileSync(job, 'echo shown > job-ran.txt\n');
  await page.setViewportSize({ width: 1280, height: 900 });
  await loginAt(page, srv.baseURL);
  await newSession(page, 'Job script', 'faux:jobsh');
  await send(page, 'Run the job.');
  const card = toolCard(page, 'run_command');
  const group = approvalGroup(card, 'run_command');
  const scripts = group.getByRole('group', { name: 'Scripts it runs', exact: true });
  // sha256("echo shown > job-ran.txt\n"), its first 12 digits.
  const digest = (await import('node:crypto')).createHash('sha256').update('echo shown > job-ran.txt\n').digest('hex');
  await expect(scripts.locator('li')).toHaveText([`job.sh sha256 ${digest.slice(0, 12)}…`]);
  await expect(scripts.locator('.script-digest')).toHaveAttribute('title', `sha256 ${digest}`);
  await card.screenshot({ path: path.join(shots, 'job-sh-1280.png') });
  await page.setViewportSize({ width: 390, height: 844 });
  await expect.poll(() => overflow(page)).toEqual({ page: 0, blocks: [] });
  await card.screenshot({ path: path.join(shots, 'job-sh-390.png') });

  // The script changes while the prompt waits; Approve runs nothing.
  fs.writeFileSync(job, 'echo changed > job-ran.txt\ntouch sneaky.txt\n');
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(card).toContainText('job.sh changed on disk after the prompt showed its digest');
  await expect(card).toContainText('nothing ran. Call run_command again to see the new digest.');
  await expectFinalText(page, 'Result: job.sh changed on disk');
  expect(fs.existsSync(ran), 'job.sh did not run').toBe(false);
  expect(fs.existsSync(path.join(srv.workspace, 'sneaky.txt'))).toBe(false);
  await page.setViewportSize({ width: 1280, height: 900 });
  await card.screenshot({ path: path.join(shots, 'job-sh-changed-1280.png') });
});
