import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Browser, type Locator, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, login, newSession, send, toolCard, transcript } from './helpers';

// Issue 34, acceptance 1: a prompt reads top-down — what will happen, where, why it asks, who
// must decide, then the buttons; the annotations fold into a details line. A voter's card shows
// their vote and no buttons, and that line goes when the final outcome arrives.
// DOCS_SHOTS=1 also writes the screenshots the README links (docs/prompt-*-{1280,390}.png).

const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };
const docs = path.resolve(__dirname, '../../docs');

/** The top of each part of a prompt, in the order the page draws them. */
async function tops(group: Locator): Promise<number[]> {
  const parts = [
    group.getByTestId('prompt-what'),
    group.getByTestId('prompt-where'),
    group.getByTestId('prompt-why'),
    group.getByTestId('prompt-who'),
    group.locator('details.hints-line'),
    group.getByRole('button', { name: 'Approve', exact: true }),
  ];
  const out: number[] = [];
  for (const p of parts) out.push((await p.boundingBox())!.y);
  return out;
}

async function shot(page: Page, group: Locator, name: string): Promise<void> {
  if (!process.env.DOCS_SHOTS) return;
  fs.mkdirSync(docs, { recursive: true });
  await group.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(docs, `${name}-${page.viewportSize()!.width}.png`) });
}

for (const width of [1280, 390]) {
  test(`a run_command prompt reads what, where, why, who, then the buttons (${width} px)`, async ({ page }) => {
    await page.setViewportSize({ width, height: 900 });
    await login(page);
    await newSession(page, `prompt order ${width}`, 'faux:deny');
    await send(page, 'Make the marker.');
    const group = approvalGroup(toolCard(page, 'run_command'), 'run_command');
    await expect(group).toBeVisible();
    await expect(group.getByTestId('prompt-what').getByLabel('Command', { exact: true })).toHaveText('$ echo created > denied-marker.txt');
    await expect(group.getByTestId('prompt-where')).toContainText('workspace');
    await expect(group.getByTestId('prompt-why')).toContainText('asks because');
    await expect(group.getByTestId('prompt-who')).toContainText('anyone who may decide this session');
    // The four annotations fold into one line; their chips are hidden until it is opened.
    const hints = group.locator('details.hints-line');
    await expect(hints.locator('summary')).toContainText('Annotations:');
    await expect(hints.locator('li').first()).toBeHidden();
    const ys = await tops(group);
    expect(ys, `tops ${ys}`).toEqual([...ys].sort((a, b) => a - b));
    await shot(page, group, 'prompt-run-command');
    await hints.locator('summary').click();
    await expect(hints.locator('li')).toHaveCount(4);
  });
}

/** Opens a link made for a person in a fresh browser context. */
async function openAs(browser: Browser, url: string, person: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(url);
  await expect(transcript(page)).toBeAttached();
  await expect(page.getByText(`Signed in as ${person}.`)).toBeVisible();
  return page;
}

async function linkFor(owner: Page, label: string, person: string): Promise<string> {
  const panel = owner.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await panel.getByRole('textbox', { name: 'For', exact: true }).fill(person);
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: label });
  await expect(item).toContainText(`for ${person}`);
  return (await item.getByRole('link', { name: /\/r\// }).textContent())!.trim();
}

test('a two-approver prompt names the rule, its note, the reviewers and the links; the voter sees their vote, no buttons, until the outcome', async ({ page, browser }) => {
  await page.setViewportSize({ width: 1280, height: 900 });
  await login(page);
  const id = await newSession(page, `two approvers order ${Date.now()}`, 'faux:approvers');
  const res = await page.request.post('/api/rules', {
    headers: auth,
    data: { text: 'run_command', effect: 'ask', scope: 'session', sessionId: id, approvers: 2, reviewers: ['alice', 'bob'], note: 'prod deploys need two people' },
  });
  expect(res.status(), await res.text()).toBe(201);
  const alice = await openAs(browser, await linkFor(page, 'release A', 'alice'), 'alice');
  const bob = await openAs(browser, await linkFor(page, 'release B', 'bob'), 'bob');
  await send(page, 'Push the release.');

  const aliceGroup = approvalGroup(toolCard(alice, 'run_command'), 'run_command');
  await expect(aliceGroup).toBeVisible();
  await expect(aliceGroup.getByTestId('prompt-why')).toContainText('prod deploys need two people');
  const who = aliceGroup.getByTestId('prompt-who');
  await expect(who).toContainText('alice, bob');
  await expect(who).toContainText('0 of 2 approvals');
  await expect(who).toContainText('links: alice (release A), bob (release B)');
  const ys = await tops(aliceGroup);
  expect(ys, `tops ${ys}`).toEqual([...ys].sort((a, b) => a - b));
  await shot(alice, aliceGroup, 'prompt-two-approvers');
  await alice.setViewportSize({ width: 390, height: 900 });
  expect(await tops(aliceGroup)).toEqual([...(await tops(aliceGroup))].sort((a, b) => a - b));
  await shot(alice, aliceGroup, 'prompt-two-approvers');
  await alice.setViewportSize({ width: 1280, height: 900 });

  // alice has the session open in a second window too.
  const aliceTwo = await alice.context().newPage();
  await aliceTwo.goto(alice.url());
  const twoGroup = approvalGroup(toolCard(aliceTwo, 'run_command'), 'run_command');
  await expect(twoGroup.getByRole('button', { name: 'Approve', exact: true })).toBeVisible();

  await aliceGroup.getByRole('button', { name: 'Approve', exact: true }).click();
  // Her other window follows, live: her vote, no buttons.
  await expect(twoGroup.getByTestId('my-vote')).toContainText('1 of 2 approvals — approved by alice');
  await expect(twoGroup.getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  const mine = aliceGroup.getByTestId('my-vote');
  await expect(mine).toContainText('Your approval is counted once: 1 of 2 approvals — approved by alice');
  await expect(aliceGroup.getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  await expect(aliceGroup.getByRole('button', { name: 'Deny', exact: true })).toHaveCount(0);
  // A reload draws the same: the vote, no buttons.
  await alice.reload();
  await expect(approvalGroup(toolCard(alice, 'run_command'), 'run_command').getByTestId('my-vote')).toContainText('1 of 2 approvals');
  await expect(approvalGroup(toolCard(alice, 'run_command'), 'run_command').getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  // bob still has his buttons.
  const bobGroup = approvalGroup(toolCard(bob, 'run_command'), 'run_command');
  await expect(bobGroup.getByTestId('approval-votes')).toHaveText('1 of 2 approvals — approved by alice');
  await bobGroup.getByRole('button', { name: 'Approve', exact: true }).click();
  // The final outcome replaces alice's card's vote line.
  await expect(toolCard(alice, 'run_command')).toContainText('approved by alice and bob');
  await expect(alice.getByText('Your approval is counted')).toHaveCount(0);
});
