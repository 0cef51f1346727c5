import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, expectFinalText, loginAt, newSession, ownPortBase, send, startOwnServer, toolCard } from './helpers';

// Issue 17, acceptance 5, the browser half (SPEC §14 "The policy file", "The Rules page"): a server
// started with -policy FILE (a valid file) lists the file's rules read-only on the Rules page (no
// Delete; the API refuses to delete them) and applies them to calls: one command the file allows
// runs without a prompt, one it denies is denied without a prompt. A bad file refused at start is
// a Go test (cmd/web).

const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };
const ALLOW = 'run_command(echo policy-allowed:*)';
const DENY = 'run_command(echo policy-denied:*)';

function rulesRow(page: Page, text: string) {
  return page.getByRole('table').getByRole('row').filter({ has: page.getByRole('cell') }).filter({ hasText: text });
}

test('acceptance 5: a policy file\'s rules are read-only on the Rules page and allow and deny calls', async ({ page }, info) => {
  const name = `policy-${info.workerIndex}`;
  const dir = path.resolve(__dirname, '../.tmp', name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'policy.json');
  fs.writeFileSync(file, JSON.stringify({ permissions: { allow: [ALLOW], deny: [DENY], defaultMode: 'default' } }, null, 2));
  const srv = await startOwnServer(name, ownPortBase + 90 + (info.workerIndex % 10), ['-policy', file]);
  try {
    await loginAt(page, srv.baseURL);

    // The Rules page: both rules, from the policy file, without Delete.
    await page.getByRole('link', { name: 'Rules', exact: true }).click();
    await expect(page).toHaveURL(/\/rules$/);
    for (const [text, effect] of [[ALLOW, 'allow'], [DENY, 'deny']]) {
      const row = rulesRow(page, text);
      await expect(row, text).toHaveCount(1);
      await expect(row, text).toContainText(effect);
      await expect(row, text).toContainText(/policy[- ]file/);
      await expect(row.getByRole('button', { name: 'Delete', exact: true }), text).toHaveCount(0);
    }
    const listed = (await (await page.request.get(`${srv.baseURL}/api/rules`, { headers: auth })).json()).rules as
      { id: string; text: string; source: string; readOnly: boolean }[];
    const policy = listed.filter((r) => r.text === ALLOW || r.text === DENY);
    expect(policy.map((r) => ({ text: r.text, source: r.source, readOnly: r.readOnly })).sort((a, b) => a.text.localeCompare(b.text)))
      .toEqual([{ text: ALLOW, source: 'policy-file', readOnly: true }, { text: DENY, source: 'policy-file', readOnly: true }]);
    const refused = await page.request.delete(`${srv.baseURL}/api/rules/${policy[0].id}`, { headers: auth });
    expect(refused.status()).toBe(403);

    // The rules apply: the allowed command runs, the denied one is denied, neither asks.
    const id = await newSession(page, 'policy rules', 'faux:policy');
    await send(page, 'Run both.');
    await expectFinalText(page, 'Policy calls done.');
    const allowed = toolCard(page, 'run_command').filter({ hasText: 'echo policy-allowed yes' });
    const denied = toolCard(page, 'run_command').filter({ hasText: 'echo policy-denied no' });
    await expect(allowed).toContainText('policy-allowed yes');
    await expect(allowed.getByRole('status').filter({ hasText: 'approved automatically' })).toBeVisible();
    await expect(denied.getByRole('status').filter({ hasText: 'denied automatically' })).toBeVisible();
    await expect(denied).toContainText(`rule ${DENY} denies`);
    await expect(approvalGroup(allowed, 'run_command')).toHaveCount(0);
    await expect(approvalGroup(denied, 'run_command')).toHaveCount(0);

    // The audit names the policy file's rules.
    const approvals = (await (await page.request.get(`${srv.baseURL}/api/sessions/${id}/approvals`, { headers: auth })).json()).approvals as
      { status: string; decisionSource: string; ruleText: string; ruleSource: string }[];
    expect(approvals.map((a) => ({ status: a.status, source: a.decisionSource, rule: a.ruleText, ruleSource: a.ruleSource })))
      .toEqual([
        { status: 'approved', source: 'rule', rule: ALLOW, ruleSource: 'policy-file' },
        { status: 'denied', source: 'rule', rule: DENY, ruleSource: 'policy-file' },
      ]);

    // Each rule decided one call: the Rules page counts its hit.
    await page.getByRole('link', { name: 'Rules', exact: true }).click();
    const headers = await page.getByRole('table').getByRole('columnheader').allInnerTexts();
    const hits = headers.findIndex((h) => /^hits$/i.test(h.trim()));
    expect(hits, 'a Hits column').toBeGreaterThanOrEqual(0);
    for (const text of [ALLOW, DENY]) await expect(rulesRow(page, text).getByRole('cell').nth(hits), text).toHaveText('1');
  } finally {
    await srv.kill();
  }
});
