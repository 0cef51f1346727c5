import { test, expect, type Page } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, transcript } from './helpers';

// Issue 16, item 4: whatever a live viewer saw, a viewer who reloads or joins late sees — the
// transcript's text and roles, and the cards' state classes.

/** The transcript as a reader and a screen reader get it: ARIA snapshot, text, card classes. */
async function capture(page: Page) {
  const log = transcript(page);
  return {
    aria: await log.ariaSnapshot(),
    text: (await log.innerText()).replace(/\s+/g, ' ').trim(),
    classes: await log.locator('[data-tool-call-id]').evaluateAll((els) =>
      els.map((el) => `${el.getAttribute('data-tool-call-id')}: ${el.className}`)),
  };
}

test('item 4, live equals reloaded: direct, grant-released, policy-allowed and nested calls read the same live, after a reload and for a late joiner', async ({ page, context }) => {
  await login(page);
  const id = await newSession(page, 'live equals reloaded', 'faux:live-equal');
  const tools = page.getByRole('group', { name: 'Tools', exact: true });
  await tools.getByRole('checkbox', { name: 'codemode', exact: true }).check();
  await expect(page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'codemode', exact: true })).toBeChecked();

  // A second viewer that only watches, open before the run starts.
  const watcher = await context.newPage();
  await watcher.goto(`/sessions/${id}`);
  await expect(transcript(watcher)).toBeAttached();

  await send(page, 'Run everything.');
  // le1 read_file: the annotation policy lets it through. le2 run_command asks: approved for
  // the session, which saves run_command(echo live-equal:*) for the session (SPEC §3: the
  // narrowed rule, never the whole tool) and so releases le3 (a later message) and codemode's
  // nested run_command.
  const first = page.locator('[data-tool-call-id="le2"]');
  await approvalGroup(first, 'run_command').getByRole('button', { name: 'Approve for session', exact: true }).click();
  // codemode: a nested read_file (policy), run_command (grant), two write_file prompts.
  const script = toolCard(page, 'codemode');
  await approvalGroup(script.locator('[data-tool-call-id="le4/3"]'), 'write_file')
    .getByRole('button', { name: 'Approve', exact: true }).click();
  const denied = approvalGroup(script.locator('[data-tool-call-id="le4/4"]'), 'write_file');
  await denied.getByRole('textbox', { name: 'Reason', exact: true }).fill('not this one');
  await denied.getByRole('button', { name: 'Deny', exact: true }).click();
  // review_diff: git_diff reads; run_checks and failing_tests ask.
  const review = toolCard(page, 'review_diff');
  await approvalGroup(review, 'run_checks').getByRole('button', { name: 'Approve', exact: true }).click();
  const tests = approvalGroup(review, 'failing_tests');
  await tests.getByRole('textbox', { name: 'Reason', exact: true }).fill('no tests now');
  await tests.getByRole('button', { name: 'Deny', exact: true }).click();
  await expectFinalText(page, 'Live and reloaded, the same.');
  await expectFinalText(watcher, 'Live and reloaded, the same.');

  // What the live pages show: the grant's decision line on the released calls, the nested
  // calls' results and decisions.
  const live = await capture(page);
  expect(live.text).toContain('and always allowed run_command(echo live-equal:*) for this session');
  await expect(page.locator('[data-tool-call-id="le3"]')).toContainText('approved automatically (rule)');
  await expect(page.locator('[data-tool-call-id="le4/2"]')).toContainText('approved automatically (rule)');
  await expect(page.locator('[data-tool-call-id="le4/1"]')).toContainText('Countersign e2e workspace');
  await expect(page.locator('[data-tool-call-id="le4/3"]')).toContainText('approved by owner');
  await expect(page.locator('[data-tool-call-id="le4/3"]')).toContainText('Created live-equal/approved.txt');
  await expect(page.locator('[data-tool-call-id="le5/2"]')).toContainText('Checks failed');
  await expect(page.locator('[data-tool-call-id="le5/3"]')).toContainText('denied by owner: no tests now');
  const watched = await capture(watcher);

  await page.reload();
  await expect(transcript(page)).toContainText('Live and reloaded, the same.');
  const reloaded = await capture(page);

  const late = await context.newPage();
  await late.goto(`/sessions/${id}`);
  await expect(transcript(late)).toContainText('Live and reloaded, the same.');
  const joined = await capture(late);

  // Finished cards carry their final state, not a stale "waiting" or "running" one.
  for (const c of live.classes) expect(c).toMatch(/ tool-(ok|denied|error)( nested)?$/);
  for (const [name, other] of [['watcher', watched], ['reloaded', reloaded], ['late joiner', joined]] as const) {
    expect(other.aria, `${name}: ARIA snapshot`).toBe(live.aria);
    expect(other.text, `${name}: text`).toBe(live.text);
    expect(other.classes, `${name}: card classes`).toEqual(live.classes);
  }
});
