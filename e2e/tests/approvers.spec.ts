import { test, expect, type Browser, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, login, newSession, send, toolCard, transcript } from './helpers';

// Issue 20, acceptance 5 and 6 (SPEC §15 "Several approvers"): a rule that needs two named
// people; approver links made for a person, whose name is fixed.

const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };

/** Adds, through the Rules API, an ask rule for run_command in this session that needs alice and bob. */
async function twoReviewersRule(page: Page, sessionId: string): Promise<void> {
  const res = await page.request.post('/api/rules', {
    headers: auth,
    data: { text: 'run_command', effect: 'ask', scope: 'session', sessionId, approvers: 2, reviewers: ['alice', 'bob'] },
  });
  expect(res.status(), await res.text()).toBe(201);
  expect((await res.json()).text).toBe('run_command approvers=2 reviewers=alice,bob');
}

/** Creates an approver link for a person from the share panel and returns its URL. */
async function linkFor(owner: Page, label: string, person: string): Promise<string> {
  const panel = owner.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await panel.getByRole('textbox', { name: 'For', exact: true }).fill(person);
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: label });
  await expect(item).toContainText(person ? `for ${person}` : label);
  return (await item.getByRole('link', { name: /\/r\// }).textContent())!.trim();
}

/** Opens a link made for a person in a fresh browser context: no name is asked. */
async function openAs(browser: Browser, url: string, person: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.goto(url);
  await expect(transcript(page)).toBeAttached();
  await expect(page.getByRole('textbox', { name: 'Your name', exact: true })).toHaveCount(0);
  await expect(page.getByText(`Signed in as ${person}.`)).toBeVisible();
  return page;
}

const votes = (p: Page) => approvalGroup(toolCard(p, 'run_command'), 'run_command').getByTestId('approval-votes');

test('two named reviewers: the owner is refused, alice counts once, bob runs the call; the audit lists both', async ({ page, browser }) => {
  await login(page);
  const id = await newSession(page, `two approvers ${Date.now()}`, 'faux:approvers');
  await twoReviewersRule(page, id);
  const aliceURL = await linkFor(page, 'release A', 'alice');
  const bobURL = await linkFor(page, 'release B', 'bob');
  const alice = await openAs(browser, aliceURL, 'alice');
  const bob = await openAs(browser, bobURL, 'bob');

  await send(page, 'Push the release.');
  const group = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  await expect(votes(page)).toHaveText('0 of 2 approvals');

  // The owner's Approve alone is refused: not a listed reviewer. Nothing runs, nothing counts.
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(group.getByRole('alert')).toContainText('owner is not a listed reviewer');
  await expect(votes(page)).toHaveText('0 of 2 approvals');

  // alice approves through her link: every page shows it, live.
  const aliceGroup = approvalGroup(toolCard(alice, 'run_command'), 'run_command');
  await aliceGroup.getByRole('button', { name: 'Approve', exact: true }).click();
  for (const p of [page, alice, bob]) await expect(votes(p)).toHaveText('1 of 2 approvals — approved by alice');
  await expect(alice.getByText('Your approval is counted once')).toBeVisible();

  // alice has voted: her card shows her vote and no buttons (issue 34); a second vote would
  // count once (the API's votes list below).
  await expect(aliceGroup.getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  await expect(votes(alice)).toHaveText('1 of 2 approvals — approved by alice');
  const res = await page.request.get(`/api/sessions/${id}/approvals`, { headers: auth });
  const [approval] = (await res.json()).approvals;
  expect(approval.status).toBe('pending');
  expect(approval.votes.map((v: { by: string }) => v.by)).toEqual(['alice']);

  // The owner's prompt kept its form: it is still a prompt (the vote changed only its line).
  await expect(group.getByRole('button', { name: 'Deny', exact: true })).toBeVisible();

  // bob's approval is the second: the call runs.
  await approvalGroup(toolCard(bob, 'run_command'), 'run_command').getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(toolCard(page, 'run_command')).toContainText('approved by alice and bob');
  await expect(transcript(page)).toContainText('The release step is done.');

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const row = page.getByRole('row').filter({ hasText: 'run_command' });
  await expect(row.getByTestId('audit-votes').getByRole('listitem')).toHaveCount(2);
  await expect(row.getByTestId('audit-votes')).toContainText('approved by alice');
  await expect(row.getByTestId('audit-votes')).toContainText('approved by bob');
});

test("bob's deny after alice's approval denies the call with his reason; the audit lists both decisions", async ({ page, browser }) => {
  await login(page);
  const id = await newSession(page, `deny of two ${Date.now()}`, 'faux:approvers');
  await twoReviewersRule(page, id);
  const alice = await openAs(browser, await linkFor(page, 'deny A', 'alice'), 'alice');
  const bob = await openAs(browser, await linkFor(page, 'deny B', 'bob'), 'bob');
  await send(page, 'Push the release.');

  await approvalGroup(toolCard(alice, 'run_command'), 'run_command').getByRole('button', { name: 'Approve', exact: true }).click();
  const bobGroup = approvalGroup(toolCard(bob, 'run_command'), 'run_command');
  await expect(votes(bob)).toHaveText('1 of 2 approvals — approved by alice');
  await bobGroup.getByRole('textbox', { name: 'Reason', exact: true }).fill('not before the freeze ends');
  await bobGroup.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(toolCard(page, 'run_command')).toContainText('denied by bob: not before the freeze ends');
  await expect(toolCard(alice, 'run_command')).toContainText('denied by bob');

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const list = page.getByRole('row').filter({ hasText: 'run_command' }).getByTestId('audit-votes');
  await expect(list.getByRole('listitem')).toHaveCount(2);
  await expect(list.getByRole('listitem').nth(0)).toContainText('approved by alice');
  await expect(list.getByRole('listitem').nth(1)).toContainText('denied by bob');
  await expect(list.getByRole('listitem').nth(1)).toContainText('not before the freeze ends');
});

test('a link made for alice cannot choose another name; an unnamed link asks for one', async ({ page, browser }) => {
  await login(page);
  await newSession(page, `named links ${Date.now()}`, 'faux:approvers');
  const aliceURL = await linkFor(page, 'named', 'alice');
  const alice = await openAs(browser, aliceURL, 'alice');
  const renamed = await alice.request.post(`${aliceURL}/name`, { form: { name: 'mallory' } });
  expect(renamed.status()).toBe(403);
  expect(await renamed.text()).toContain('This link was made for alice: the name is fixed.');
  await alice.reload();
  await expect(alice.getByText('Signed in as alice.')).toBeVisible();

  const unnamedURL = await linkFor(page, 'anyone', '');
  const other = await (await browser.newContext()).newPage();
  await other.goto(unnamedURL);
  await expect(other.getByRole('textbox', { name: 'Your name', exact: true })).toBeVisible();
});
