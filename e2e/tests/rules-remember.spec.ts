import { test, expect, type Browser, type Locator, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, expectFinalText, login, newSession, send, stopButton, toolCard, transcript } from './helpers';

// Issue 17, acceptance 3 (SPEC §14 "Remembering from the prompt", "The Rules page", "Only people
// decide rules"; §6 accessibility rows "remembering", "rules page"): "Always allow…" on a
// run_command prompt offers run_command(<first words>:*) in textbox "Rule", editable; saving
// with scope workspace approves the call; a second session on the same workspace runs a matching
// command without a prompt while a non-matching one still asks; the Rules page lists the rule
// with hits 1; Delete makes the next call ask again. An approver link needs canRemember to make
// a rule, and the rule names who made it.
//
// The commands (echo remember-e2e …, echo reviewer-e2e …) are used by no other test, so a
// workspace rule made here cannot change another test's prompts.

const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };

interface ApiRule { id: string; text: string; effect: string; scope: string; source: string; createdBy: string; hits: number; readOnly: boolean }

async function rulesNamed(page: Page, text: string): Promise<ApiRule[]> {
  const res = await page.request.get('/api/rules', { headers: auth });
  expect(res.status()).toBe(200);
  return ((await res.json()).rules as ApiRule[]).filter((r) => r.text === text);
}

/** The Rules page's row of the rule whose text is `text`, and the text of its cell under `column`. */
function ruleRow(page: Page, text: string): Locator {
  return page.getByRole('table').getByRole('row').filter({ has: page.getByRole('cell') }).filter({ hasText: text });
}
async function cellOf(page: Page, row: Locator, column: RegExp): Promise<string> {
  const headers = await page.getByRole('table').getByRole('columnheader').allInnerTexts();
  const i = headers.findIndex((h) => column.test(h.trim()));
  expect(i, `column ${column}`).toBeGreaterThanOrEqual(0);
  return (await row.getByRole('cell').nth(i).innerText()).trim();
}

/** Opens "Always allow…" on the card's prompt and returns the form's controls. */
async function openRemember(card: Locator) {
  await approvalGroup(card, 'run_command').getByRole('button', { name: 'Always allow…', exact: true }).click();
  return {
    rule: card.getByRole('textbox', { name: 'Rule', exact: true }),
    scope: card.getByRole('combobox', { name: 'Scope', exact: true }),
    save: card.getByRole('button', { name: 'Save rule', exact: true }),
  };
}

test('acceptance 3: Always allow… saves a workspace rule that approves the call, covers a second session, is listed with its hit, and Delete makes the next call ask', async ({ page }) => {
  const RULE = 'run_command(echo remember-e2e:*)';
  await login(page);
  for (const r of await rulesNamed(page, RULE)) await page.request.delete(`/api/rules/${r.id}`, { headers: auth });

  // The prompt: "Always allow…" pre-fills the narrowest rule, editable; a bad rule is refused in
  // an alert and the typed text stays.
  await newSession(page, 'remember first', 'faux:remember-first');
  await send(page, 'Run it.');
  const card = toolCard(page, 'run_command');
  await expect(approvalGroup(card, 'run_command')).toBeVisible();
  const form = await openRemember(card);
  await expect(form.rule).toHaveValue(RULE);
  await expect(form.rule).toBeEditable();
  await expect(form.scope).toHaveValue('session');
  await form.rule.fill('run_command(echo remember-e2e:*');
  await form.save.click();
  await expect(card.getByRole('alert')).toBeVisible();
  await expect(form.rule).toHaveValue('run_command(echo remember-e2e:*');
  expect(await rulesNamed(page, RULE)).toHaveLength(0);

  // Saved with scope workspace: the call is approved and runs.
  await form.rule.fill(RULE);
  await form.scope.selectOption('workspace');
  await form.save.click();
  await expectFinalText(page, 'First ran: remember-e2e first');
  await expect(approvalGroup(card, 'run_command')).toHaveCount(0);
  const [saved] = await rulesNamed(page, RULE);
  expect(saved).toMatchObject({ effect: 'allow', scope: 'workspace', source: 'prompt', readOnly: false });

  // A second session on the same workspace: the matching command runs without a prompt, the
  // other one asks.
  await newSession(page, 'remember second', 'faux:remember-second');
  await send(page, 'Run both.');
  const covered = toolCard(page, 'run_command').filter({ hasText: 'echo remember-e2e second' });
  const other = toolCard(page, 'run_command').filter({ hasText: 'echo other-e2e third' });
  await expect(approvalGroup(other, 'run_command')).toBeVisible();
  await expect(covered).toContainText('remember-e2e second');
  await expect(approvalGroup(covered, 'run_command')).toHaveCount(0);
  await expect(covered.getByRole('status').filter({ hasText: 'approved automatically' })).toBeVisible();
  await approvalGroup(other, 'run_command').getByRole('button', { name: 'Deny', exact: true }).click();
  await expectFinalText(page, 'Second session done.');

  // The Rules page (link in the header): the rule with its hit, then Delete.
  await page.getByRole('link', { name: 'Rules', exact: true }).click();
  await expect(page).toHaveURL(/\/rules$/);
  const row = ruleRow(page, RULE);
  await expect(row).toHaveCount(1);
  await expect(row).toContainText('allow');
  await expect(row).toContainText('workspace');
  await expect(row).toContainText('prompt');
  expect(await cellOf(page, row, /^hits$/i)).toBe('1');
  await row.getByRole('button', { name: 'Delete', exact: true }).click();
  await expect(ruleRow(page, RULE)).toHaveCount(0);
  expect(await rulesNamed(page, RULE)).toHaveLength(0);

  // The next call asks again.
  await newSession(page, 'remember third', 'faux:remember-second');
  await send(page, 'Run both again.');
  await expect(approvalGroup(toolCard(page, 'run_command').filter({ hasText: 'echo remember-e2e second' }), 'run_command')).toBeVisible();
  await stopButton(page).click();
  await expect(stopButton(page)).toBeHidden();
});

/** Makes an approver link through the JSON API and returns its URL. */
async function approverLink(page: Page, sessionId: string, label: string, canRemember: boolean): Promise<string> {
  const res = await page.request.post(`/api/sessions/${sessionId}/shares`, { headers: auth, data: { role: 'approver', label, canRemember } });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).url;
}

async function openAsReviewer(browser: Browser, url: string, name: string): Promise<Page> {
  const ctx = await browser.newContext(); // no cookies: not the owner
  const page = await ctx.newPage();
  await page.goto(url);
  await page.getByRole('textbox', { name: 'Your name', exact: true }).fill(name);
  await page.getByRole('button', { name: 'Continue', exact: true }).click();
  await expect(transcript(page)).toBeAttached();
  return page;
}

test('acceptance 3, rights: an approver link without canRemember has no Always allow… (and is refused 403); one with it saves a rule that names the reviewer', async ({ page, browser }) => {
  const RULE = 'run_command(echo reviewer-e2e:*)';
  await login(page);
  const id = await newSession(page, 'remember rights', 'faux:remember-reviewer');
  const plainURL = await approverLink(page, id, 'plain', false);
  const plain = await openAsReviewer(browser, plainURL, 'Rita');
  const trusted = await openAsReviewer(browser, await approverLink(page, id, 'Ops', true), 'Gus');
  await send(page, 'Run it.');

  const plainGroup = approvalGroup(toolCard(plain, 'run_command'), 'run_command');
  await expect(plainGroup.getByRole('button', { name: 'Approve', exact: true })).toBeVisible();
  await expect(plainGroup.getByRole('button', { name: 'Always allow…', exact: true })).toHaveCount(0);
  await expect(toolCard(plain, 'run_command').getByRole('textbox', { name: 'Rule', exact: true })).toHaveCount(0);
  // The same request, made with the plain reviewer's own cookie, is refused.
  const approvalId = (await plainGroup.getAttribute('data-approval-id'))!;
  const refused = await plain.request.post(`${plainURL}/approvals/${approvalId}/decision`, {
    form: { decision: 'remember', rule: RULE, scope: 'session' },
  });
  expect(refused.status()).toBe(403);
  expect(await rulesNamed(page, RULE)).toHaveLength(0);

  // The canRemember link saves the suggested rule: the call runs, the rule names Gus.
  const card = toolCard(trusted, 'run_command');
  const form = await openRemember(card);
  await expect(form.rule).toHaveValue(RULE);
  await form.save.click();
  await expectFinalText(page, 'Reviewer ran: reviewer-e2e once');
  const [made] = await rulesNamed(page, RULE);
  expect(made).toMatchObject({ effect: 'allow', scope: 'session', source: 'prompt' });
  expect(made.createdBy).toContain('Gus');
  await page.getByRole('link', { name: 'Rules', exact: true }).click();
  const row = ruleRow(page, RULE);
  await expect(row).toContainText('Gus');
  await row.getByRole('button', { name: 'Delete', exact: true }).click();
  await expect(ruleRow(page, RULE)).toHaveCount(0);
  await plain.context().close();
  await trusted.context().close();
});
