import { expect, test, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, login, newSession, send, toolCard } from './helpers';

// Issue 16, item 3: a run parked on a person is "waiting for approval", not "running" — in the
// session header (first render, live, after a reload) and in the session list, where waiting
// sessions come first with a badge; each pending prompt counts down to its deadline.

/** The session header's run state badge. */
function runState(page: Page) {
  return page.locator('.session-header #run-state');
}

/** The session list's row of the session titled `title`. */
function listRow(page: Page, title: string) {
  return page.locator('table.session-list tbody tr').filter({
    has: page.getByRole('link', { name: title, exact: true }),
  });
}

/** The titles of the session list, top to bottom. */
async function listTitles(page: Page): Promise<string[]> {
  return page.locator('table.session-list tbody tr td:first-child a').allTextContents();
}

test('item 3, waiting is a state: a session parked on an approval says "waiting for approval" in its header and in the list, above a newer idle session with a badge, after reload too', async ({ page }, info) => {
  const stamp = `${info.workerIndex}-${Date.now()}`;
  const waitingTitle = `waits for a person ${stamp}`;
  const idleTitle = `newer and idle ${stamp}`;
  await login(page);
  await newSession(page, waitingTitle, 'faux:deny');
  const sessionURL = page.url();
  await expect(runState(page)).toHaveText('idle');
  await send(page, 'Make the marker.');
  const group = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  await expect(group).toBeVisible();
  // Live: the prompt's arrival turns the header to waiting.
  await expect(runState(page)).toHaveText('waiting for approval');
  // First render after a reload: the same, from the store.
  await page.reload();
  await expect(group).toBeVisible();
  await expect(runState(page)).toHaveText('waiting for approval');

  // A newer session that is idle: newest first would put it on top; waiting comes first.
  await newSession(page, idleTitle, 'faux:deny');
  await expect(runState(page)).toHaveText('idle');
  for (const pass of ['first render', 'after reload']) {
    if (pass === 'first render') await page.goto('/');
    else await page.reload();
    const waitingRow = listRow(page, waitingTitle);
    await expect(waitingRow, pass).toContainText('waiting for approval');
    await expect(waitingRow.locator('.badge'), pass).toHaveText('1 waiting');
    await expect(listRow(page, idleTitle), pass).toContainText('idle');
    await expect(listRow(page, idleTitle).locator('.badge'), pass).toHaveCount(0);
    const titles = await listTitles(page);
    expect(titles.indexOf(waitingTitle), `${pass}: ${titles.join(' | ')}`).toBeLessThan(titles.indexOf(idleTitle));
  }

  // Decided: the session is no longer waiting, live and in the list.
  await page.goto(sessionURL);
  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(runState(page)).toHaveText('idle');
  await page.goto('/');
  await expect(listRow(page, waitingTitle)).toContainText('idle');
  await expect(listRow(page, waitingTitle).locator('.badge')).toHaveCount(0);
});

/** Seconds left in a countdown text such as "times out in 14:52". */
function secondsLeft(text: string | null): number {
  const m = /^times out in (\d+):(\d\d)$/.exec((text ?? '').trim());
  if (!m) throw new Error(`not a countdown: ${JSON.stringify(text)}`);
  return Number(m[1]) * 60 + Number(m[2]);
}

test('item 3, waiting is a state: a pending prompt counts down to its deadline, createdAt plus the approval timeout', async ({ page }) => {
  await login(page);
  const id = await newSession(page, 'countdown', 'faux:deny');
  await send(page, 'Make the marker.');
  const group = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  await expect(group).toBeVisible();
  const countdown = group.getByText(/^times out in \d+:\d\d$/);
  await expect(countdown).toBeVisible();
  const first = secondsLeft(await countdown.textContent());
  // serve.sh starts the suite's server with -approval-timeout 15m.
  expect(first).toBeGreaterThan(14 * 60);
  expect(first).toBeLessThanOrEqual(15 * 60);
  // It ticks down while the page is open.
  await expect.poll(async () => secondsLeft(await countdown.textContent()), { message: 'the countdown decreases' })
    .toBeLessThan(first);

  // The deadline the page carries is the approval's createdAt plus the timeout.
  const res = await page.request.get(`/api/sessions/${id}/approvals?status=pending`, {
    headers: { Authorization: `Bearer ${OWNER_TOKEN}` },
  });
  expect(res.status()).toBe(200);
  const [approval] = (await res.json()).approvals;
  expect(await group.getAttribute('data-approval-id')).toBe(approval.id);
  const deadline = Date.parse((await group.locator('time[data-countdown]').getAttribute('datetime'))!);
  expect(Math.abs(deadline - (Date.parse(approval.createdAt) + 15 * 60 * 1000))).toBeLessThan(2);

  // A reload renders the same countdown from the store, no further from the end.
  const before = secondsLeft(await countdown.textContent());
  await page.reload();
  await expect(countdown).toBeVisible();
  expect(secondsLeft(await countdown.textContent())).toBeLessThanOrEqual(before);

  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(group).toBeHidden();
});
