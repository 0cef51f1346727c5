import { expect, test, type Page } from '@playwright/test';
import { approvalGroup, loginAt, newSession, send, startOwnServer, toolCard, type OwnServer } from './helpers';

// Issue 20, acceptance 1 and 2 (SPEC §15 "The inbox", "Browser notifications"). The inbox counts
// every pending approval of the server, so each test drives a server of its own (port 0: a free
// one): the suite's shared server holds other tests' prompts.

let srv: OwnServer;
test.beforeEach(async ({}, info) => {
  srv = await startOwnServer(`inbox-${info.workerIndex}-${Date.now()}`, 0);
});
test.afterEach(async () => {
  await srv.kill();
});

/** The header's inbox link (SPEC §6: link "Inbox" whose text ends with the pending count). */
function badge(page: Page) {
  return page.getByTestId('inbox-badge');
}

/** Opens a session on faux:deny (one run_command prompt) and parks it on its approval. */
async function parkedSession(page: Page, title: string): Promise<string> {
  await page.goto(srv.baseURL + '/');
  const id = await newSession(page, title, 'faux:deny');
  await send(page, 'Make the marker.');
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();
  return id;
}

test('acceptance 1: the inbox lists three parked sessions oldest first with session, tool and wait; badge and title say (3); `a` approves the focused one and its call runs; a decision in a second tab turns its card into "approved by owner in another window"; the badge reaches (1)', async ({ page, context }) => {
  await loginAt(page, srv.baseURL);
  const titles = ['inbox first <b>oldest</b>', 'inbox second', 'inbox third'];
  const ids: string[] = [];
  for (const t of titles) ids.push(await parkedSession(page, t));

  await page.goto(srv.baseURL + '/inbox');
  const cards = page.locator('#inbox-list > .inbox-card');
  await expect(cards).toHaveCount(3);
  // Oldest first, each with its session (a link to its prompt), its tool and how long it waited.
  for (let i = 0; i < 3; i++) {
    const card = cards.nth(i);
    await expect(card.getByRole('link', { name: titles[i], exact: true })).toHaveAttribute('href', new RegExp(`^/sessions/${ids[i]}#tc-`));
    await expect(card.locator('.inbox-tool')).toHaveText('run_command');
    await expect(card.locator('.inbox-waited')).toHaveText(/^waiting \d+ (s|min)$/);
    // The session page's prompt: the exact command, and its buttons.
    const group = approvalGroup(card, 'run_command');
    await expect(group).toContainText('echo created > denied-marker.txt');
    await expect(group.getByRole('button', { name: 'Approve', exact: true })).toBeVisible();
    await expect(group.getByRole('button', { name: 'Always allow…', exact: true })).toBeVisible();
  }
  await expect(badge(page)).toHaveText(/^\s*Inbox\s*\(3\)\s*$/);
  await expect(page).toHaveTitle(/^\(3\) Inbox · Countersign$/);
  await expect(page.getByText('Nothing waits for you.')).toBeHidden();

  // The oldest is the current card at first; `j` and `k` move; `a` approves the current one.
  await expect(cards.nth(0)).toHaveAttribute('data-current', '');
  await page.keyboard.press('j');
  await expect(cards.nth(1)).toHaveAttribute('data-current', '');
  await expect(cards.nth(0)).not.toHaveAttribute('data-current', '');
  await page.keyboard.press('k');
  await expect(cards.nth(0)).toHaveAttribute('data-current', '');
  await page.keyboard.press('a');
  // Decided on this page: its outcome, not "in another window".
  await expect(cards.nth(0)).toContainText('approved by owner');
  await expect(cards.nth(0)).not.toContainText('in another window');
  await expect(badge(page)).toHaveText(/\(2\)/);
  await expect(page).toHaveTitle(/^\(2\) Inbox/);

  // That session's call ran: its card has the command's result.
  const other = await context.newPage();
  await other.goto(srv.baseURL + '/sessions/' + ids[0]);
  await expect(toolCard(other, 'run_command')).toHaveAttribute('data-state', 'ok');

  // Another window decides the second session's prompt: the inbox card says so without a reload.
  await other.goto(srv.baseURL + '/sessions/' + ids[1]);
  // The session page's badge and title count too.
  await expect(badge(other)).toHaveText(/\(2\)/);
  await expect(other).toHaveTitle(/^\(2\) inbox second · Countersign$/);
  await approvalGroup(toolCard(other, 'run_command'), 'run_command').getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(cards.nth(1)).toContainText('approved by owner in another window');
  await expect(approvalGroup(cards.nth(1), 'run_command')).toHaveCount(0);
  await expect(badge(page)).toHaveText(/^\s*Inbox\s*\(1\)\s*$/);
  await expect(page).toHaveTitle(/^\(1\) Inbox · Countersign$/);
  await expect(badge(other)).toHaveText(/\(1\)/);
  await expect(other).toHaveTitle(/^\(1\) inbox second/);

  // The current card moved on from the decided ones: `d` focuses its reason; Enter then denies
  // (not the form's first button, Approve).
  await expect(cards.nth(2)).toHaveAttribute('data-current', '');
  await page.keyboard.press('d');
  const reason = cards.nth(2).getByRole('textbox', { name: 'Reason', exact: true });
  await expect(reason).toBeFocused();
  await page.keyboard.type('not today');
  await page.keyboard.press('Enter');
  await expect(cards.nth(2)).toContainText('denied by owner: not today');
  await expect(badge(page)).toHaveText(/^\s*Inbox\s*$/);
  await expect(page).toHaveTitle(/^Inbox · Countersign$/);
  await expect(page.getByText('Nothing waits for you.')).toBeVisible();
});

test('acceptance 2: with permission granted, a new approval while the page is hidden raises exactly one Notification with the tool and the session; none while it is visible', async ({ page, context }) => {
  await context.grantPermissions(['notifications'], { origin: srv.baseURL });
  // A recorder in place of the browser's Notification, and a visibility the test can flip.
  await context.addInitScript(() => {
    const w = window as any;
    w.__notes = [];
    class Recorder {
      static permission = 'granted';
      static requestPermission() { return Promise.resolve('granted'); }
      onclick: (() => void) | null = null;
      constructor(public title: string, public options: any) {
        w.__notes.push({ title, body: options?.body, tag: options?.tag });
        (w.__instances ||= []).push(this);
      }
      close() {}
    }
    w.Notification = Recorder;
    let state = 'visible';
    Object.defineProperty(document, 'visibilityState', { get: () => state, configurable: true });
    Object.defineProperty(document, 'hidden', { get: () => state === 'hidden', configurable: true });
    w.__setVisibility = (s: string) => { state = s; document.dispatchEvent(new Event('visibilitychange')); };
  });
  await loginAt(page, srv.baseURL);
  const second = await context.newPage();
  await second.goto(srv.baseURL + '/inbox');
  // Granted: the button says so (issue 34) instead of asking again.
  await expect(second.getByRole('button', { name: 'Notifications on', exact: true })).toBeVisible();
  await expect(second.getByText('Nothing waits for you.')).toBeVisible();

  // Visible: a new approval shows in the inbox, and no notification.
  await parkedSession(page, 'seen while visible');
  await expect(second.locator('#inbox-list > .inbox-card')).toHaveCount(1);
  await expect(badge(second)).toHaveText(/\(1\)/);
  expect(await second.evaluate(() => (window as any).__notes)).toEqual([]);

  // Hidden: exactly one notification, with the tool and the session.
  await second.evaluate(() => (window as any).__setVisibility('hidden'));
  await parkedSession(page, 'arrives while hidden');
  await expect(second.locator('#inbox-list > .inbox-card')).toHaveCount(2);
  await expect(badge(second)).toHaveText(/\(2\)/);
  await expect.poll(() => second.evaluate(() => (window as any).__notes.length)).toBe(1);
  const notes = await second.evaluate(() => (window as any).__notes);
  expect(notes[0].title).toContain('run_command');
  expect(notes[0].body).toContain('run_command');
  expect(notes[0].body).toContain('arrives while hidden');
  // The notification names the command (issue 34).
  expect(notes[0].body).toContain('$ echo created > denied-marker.txt');
  const aid = await second.locator('#inbox-list > .inbox-card').nth(1).getAttribute('data-approval-id');
  expect(notes[0].tag).toBe(aid);
  // Its click focuses the window and the approval's card.
  await second.evaluate(() => (window as any).__instances[0].onclick());
  await expect(second.locator('#inbox-' + aid)).toBeFocused();
  await expect(second.locator('#inbox-' + aid)).toHaveAttribute('data-current', '');
  // The decision that follows (approval_resolved) and a badge update raise nothing more.
  await page.goto(srv.baseURL + '/inbox');
  await approvalGroup(page.locator('#inbox-' + aid), 'run_command').getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(badge(second)).toHaveText(/\(1\)/);
  expect(await second.evaluate(() => (window as any).__notes.length)).toBe(1);
  // The session list (a page with the badge's small socket) notifies too, once, while hidden.
  const list = await context.newPage();
  await list.goto(srv.baseURL + '/');
  await list.evaluate(() => (window as any).__setVisibility('hidden'));
  await parkedSession(page, 'third, on the list');
  await expect(badge(list)).toHaveText(/\(2\)/);
  await expect.poll(() => list.evaluate(() => (window as any).__notes.length)).toBe(1);
  expect((await list.evaluate(() => (window as any).__notes))[0].body).toContain('third, on the list');
});
