import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Browser, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, expectFinalText, login, newSession, send, toolCard } from './helpers';

// Issue 17, acceptance 1 (SPEC §3, §14): the 27 annotation combinations (readOnlyHint,
// destructiveHint, openWorldHint, each absent / true / false) × the three modes × (no rule, an
// allow, an ask or a deny rule), driven by the same table the Go gate test reads
// (internal/gate/testdata/decision-table.json). The fixture tools ann_<r>_<d>_<o> (-fixture-tools;
// u absent, t true, f false) are called all at once by the faux script `annotations`. For every
// card: a pending approval group (prompt), its result (run), or the denial without a prompt
// (deny); the JSON API's approvals and the audit page name the source the table expects.

interface Row {
  readOnlyHint: boolean | null;
  destructiveHint: boolean | null;
  openWorldHint: boolean | null;
  mode: Mode;
  rule: RuleState;
  outcome: 'prompt' | 'run' | 'deny';
  source: 'rule' | 'mode' | 'annotation default';
}
type Mode = 'default' | 'plan' | 'accept-edits';
type RuleState = 'none' | 'allow' | 'ask' | 'deny';

const table: Row[] = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../internal/gate/testdata/decision-table.json'), 'utf8'));
const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };
/** The rule each rule state adds, on every annotation tool, in the session's own scope. */
const RULE = 'ann_*';

const letter = (b: boolean | null) => (b === null ? 'u' : b ? 't' : 'f');
const toolOf = (r: Row) => `ann_${letter(r.readOnlyHint)}_${letter(r.destructiveHint)}_${letter(r.openWorldHint)}`;

test('the decision table has every combination once, and the script calls each tool', () => {
  const keys = new Set(table.map((r) => `${toolOf(r)} ${r.mode} ${r.rule}`));
  expect(table).toHaveLength(27 * 3 * 4);
  expect(keys.size).toBe(table.length);
  const script = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../scripts/annotations.json'), 'utf8'));
  const called = script.steps[0].content.filter((b: { type: string }) => b.type === 'toolCall').map((b: { name: string }) => b.name).sort();
  expect(called).toEqual([...new Set(table.map(toolOf))].sort());
});

/** Sets the session's mode with the combobox "Mode" and waits for the server's answer. */
async function setMode(page: Page, id: string, mode: Mode): Promise<void> {
  const box = page.getByRole('combobox', { name: 'Mode', exact: true });
  if ((await box.inputValue()) !== mode) {
    const saved = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === `/sessions/${id}/mode`);
    await box.selectOption(mode);
    expect((await saved).status()).toBe(200);
  }
  await expect(page.getByRole('combobox', { name: 'Mode', exact: true })).toHaveValue(mode);
}

interface ApiApproval {
  id: string;
  toolName: string;
  status: string;
  automatic: boolean;
  decisionSource?: string;
  ruleText?: string;
  mode?: string;
}

const statusOf = { prompt: 'pending', run: 'approved', deny: 'denied' } as const;

/** The words the audit row of an automatic decision names its source by (SPEC §14 audit). */
function auditWords(r: Row): string {
  switch (r.source) {
    case 'rule': return `rule ${RULE}`;
    case 'mode': return `${r.mode} mode`;
    default: return 'annotation default';
  }
}

/** One session: rule state `rule` in mode `mode`, every card checked against the table. */
async function runCase(browser: Browser, baseURL: string, mode: Mode, rule: RuleState): Promise<void> {
  const rows = table.filter((r) => r.mode === mode && r.rule === rule);
  expect(rows).toHaveLength(27);
  const context = await browser.newContext({ baseURL });
  const page = await context.newPage();
  try {
    await login(page);
    const id = await newSession(page, `modes ${mode} ${rule} ${Date.now()}`, 'faux:annotations');
    if (rule !== 'none') {
      const res = await page.request.post('/api/rules', { headers: auth, data: { text: RULE, effect: rule, scope: 'session', sessionId: id } });
      expect(res.status(), await res.text()).toBe(201);
    }
    await setMode(page, id, mode);
    await send(page, 'Call every annotation tool.');

    // The batch waits for its prompts together (SPEC §2): first every prompt is shown, and the
    // JSON API's approvals carry the table's status and decision source, one per call.
    const prompts = rows.filter((r) => r.outcome === 'prompt');
    await expect(page.getByRole('group', { name: /^Approval required: ann_/ })).toHaveCount(prompts.length);
    for (const r of prompts) await expect(approvalGroup(toolCard(page, toolOf(r)), toolOf(r)), toolOf(r)).toBeVisible();
    let approvals: ApiApproval[] = [];
    await expect.poll(async () => {
      const res = await page.request.get(`/api/sessions/${id}/approvals`, { headers: auth });
      approvals = (await res.json()).approvals;
      return approvals.length;
    }, { message: 'an approval record per call' }).toBe(27);
    for (const r of rows) {
      const a = approvals.filter((x) => x.toolName === toolOf(r));
      expect(a, toolOf(r)).toHaveLength(1);
      expect({ tool: toolOf(r), status: a[0].status, source: a[0].decisionSource, mode: a[0].mode, automatic: a[0].automatic },
        `${toolOf(r)} in ${mode} mode with ${rule} rule`)
        .toEqual({ tool: toolOf(r), status: statusOf[r.outcome], source: r.source, mode, automatic: r.outcome !== 'prompt' });
      if (r.source === 'rule') expect(a[0].ruleText, toolOf(r)).toBe(RULE);
    }

    // A person denies every prompt; then the batch runs and the model answers.
    for (const a of approvals.filter((x) => x.status === 'pending')) {
      const res = await page.request.post(`/api/approvals/${a.id}/decision`, { headers: auth, data: { decision: 'deny', reason: 'table check' } });
      expect(res.status(), await res.text()).toBe(200);
    }
    await expectFinalText(page, 'All 27 annotation calls are settled.');

    // Every card: ran (its result), denied without a prompt (the rule's or the mode's denial),
    // or prompted (and then denied by the person, never run).
    for (const r of rows) {
      const name = toolOf(r);
      const card = toolCard(page, name);
      await test.step(`${name}: ${r.outcome} (${r.source})`, async () => {
        await expect(approvalGroup(card, name)).toHaveCount(0);
        switch (r.outcome) {
          case 'run':
            await expect(card).toContainText(`ran ${name}`);
            await expect(card).not.toContainText('denied');
            break;
          case 'deny':
            await expect(card.getByRole('status').filter({ hasText: 'denied automatically' })).toBeVisible();
            await expect(card).toContainText(r.source === 'mode' ? 'Plan mode: read-only' : `rule ${RULE} denies ${name}`);
            await expect(card).not.toContainText(`ran ${name}`);
            break;
          case 'prompt':
            await expect(card.getByRole('status').filter({ hasText: 'denied by owner' })).toBeVisible();
            await expect(card).not.toContainText(`ran ${name}`);
            break;
        }
      });
    }

    // The audit page: a row per gated call; an automatic decision names its rule, mode or the
    // annotation default.
    const audit = await context.newPage();
    await audit.goto(`/sessions/${id}/audit`);
    const tableRows = audit.getByRole('table').getByRole('row').filter({ has: audit.getByRole('cell') });
    await expect(tableRows).toHaveCount(27);
    for (const r of rows.filter((x) => x.outcome !== 'prompt')) {
      const row = tableRows.filter({ has: audit.getByRole('cell', { name: toolOf(r), exact: true }) });
      await expect(row, toolOf(r)).toHaveCount(1);
      await expect(row, toolOf(r)).toContainText(auditWords(r));
    }
  } finally {
    await context.close();
  }
}

for (const mode of ['default', 'plan', 'accept-edits'] as Mode[]) {
  test(`acceptance 1, ${mode} mode: 27 annotation combinations × no rule, allow, ask, deny, as the decision table says`, async ({ browser, baseURL }) => {
    test.setTimeout(180_000);
    // Each rule state in its own session (its rule is scoped to it), side by side.
    await Promise.all((['none', 'allow', 'ask', 'deny'] as RuleState[]).map((rule) => runCase(browser, baseURL!, mode, rule)));
  });
}
