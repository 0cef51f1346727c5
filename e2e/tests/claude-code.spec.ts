import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, type Page } from '@playwright/test';
import { approvalGroup, login, loginAt, startOwnServer, toolCard, transcript } from './helpers';
import {
  Receiver, addRule, decide, bashPrompt, claudeProject, claudeSessionId, claudeSettings, claudeToolResults, createConnection,
  describe as describeRun, finalText, requireAgents, runClaude, test, withHookTimeout, type AgentRun,
} from './real-agents';

// Issue 30, acceptance 2 (and the browser case of acceptance 4): the real Claude Code 2.1.328,
// headless and offline, against bin/fakemodel (a fake Anthropic API that asks for `Bash` with the
// command in the prompt's `fake-bash:` line), with a connection's snippet as the project's
// .claude/settings.json — its http hooks reach Countersign's POST /hooks/claude-code, and a person
// decides in the browser. One fake model per worker and the suite's server are shared by the
// tests (each has its own connection, project and agent session); the webhook case starts a
// server of its own (-notify-webhook).

test.beforeEach(() => requireAgents('claude'));

/** The held call of `command` in the inbox; follows its link to the agent session's page and returns the call's card. */
async function openHeldCall(page: Page, command: string, base = '') {
  await page.goto(`${base}/inbox`);
  const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: command });
  await expect(card).toHaveCount(1, { timeout: 30_000 });
  await expect(card.locator('.inbox-tool')).toHaveText('Bash');
  const href = await card.getByRole('link').first().getAttribute('href');
  expect(href).toMatch(/^\/sessions\/[^/#]+#tc-/);
  await page.goto(base + href!);
  const call = toolCard(page, 'Bash');
  await expect(call).toContainText(command);
  return call;
}

/** The run's Bash tool result as Claude Code reported it (exactly one). */
function onlyResult(r: AgentRun) {
  const results = claudeToolResults(r);
  expect(results, describeRun(r)).toHaveLength(1);
  return results[0];
}

test('a held Bash call shows with its provenance; approved, it runs and its outcome shows in the card', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e claude approve', 'claude-code');
  const project = claudeProject('cc-approve', claudeSettings(conn.snippet), fakeModel, conn.token);
  const command = 'echo approved-output && touch approved-marker';
  const running = runClaude(project, bashPrompt(command));

  await login(page);
  const call = await openHeldCall(page, command);
  // Provenance: the agent, the working directory, Claude Code's session id (from the agent's own
  // stream-json, which it prints first).
  const header = page.getByRole('region', { name: 'Agent', exact: true });
  await expect(header).toContainText('claude-code');
  await expect(header).toContainText(project.dir);
  await expect(header).toContainText(await claudeSessionId(running));
  // The person's prompt (UserPromptSubmit) is in the transcript.
  await expect(transcript(page)).toContainText(`fake-bash: ${command}`);
  expect(project.has('approved-marker'), 'nothing runs before the person decides').toBe(false);

  await decide(approvalGroup(call, 'Bash').getByRole('button', { name: 'Approve', exact: true }));
  const r = await running.done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('approved-marker'), describeRun(r)).toBe(true);
  expect(onlyResult(r)).toEqual({ content: 'approved-output', is_error: false });
  expect(finalText(r)).toBe('fake model saw: approved-output');
  // The outcome Claude Code reported (PostToolUse) in the call's card.
  await expect(call).toHaveAttribute('data-state', 'ok');
  await expect(call).toContainText('approved-output');
  // As stored (a reload): the command, who approved it, its outcome.
  await page.reload();
  const stored = toolCard(page, 'Bash');
  await expect(stored.getByLabel('Command', { exact: true })).toHaveText(`$ ${command}`);
  await expect(stored).toHaveAttribute('data-state', 'ok');
  await expect(stored).toContainText('approved by owner');
  await expect(stored).toContainText('approved-output');
});

test('denied with a reason: Claude Code carries the reason to the model and nothing runs', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e claude deny', 'claude-code');
  const project = claudeProject('cc-deny', claudeSettings(conn.snippet), fakeModel, conn.token);
  const command = 'touch denied-marker';
  const running = runClaude(project, bashPrompt(command));

  await login(page);
  const call = await openHeldCall(page, command);
  const group = approvalGroup(call, 'Bash');
  await group.getByRole('textbox', { name: 'Reason', exact: true }).fill('not on a Friday');
  await decide(group.getByRole('button', { name: 'Deny', exact: true }));
  const r = await running.done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('denied-marker'), describeRun(r)).toBe(false);
  const result = onlyResult(r);
  expect(result.is_error).toBe(true);
  expect(result.content).toContain('not on a Friday');
  expect(finalText(r)).toContain('not on a Friday');
  await expect(call).toContainText('denied by owner: not on a Friday');
  // As stored: denied by the person, never ran.
  await page.reload();
  await expect(toolCard(page, 'Bash')).toContainText('denied by owner: not on a Friday');
  await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'denied');
});

test('edited before approval: the edited command runs, not the original', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e claude edit', 'claude-code');
  const project = claudeProject('cc-edit', claudeSettings(conn.snippet), fakeModel, conn.token);
  const command = 'touch original-marker';
  const running = runClaude(project, bashPrompt(command));

  await login(page);
  const call = await openHeldCall(page, command);
  const group = approvalGroup(call, 'Bash');
  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  await group.getByRole('textbox', { name: 'Arguments', exact: true }).fill('{"command": "touch edited-marker", "description": "edited by a person"}');
  await expect(call.getByLabel('Command', { exact: true })).toHaveText('$ touch edited-marker');
  await decide(group.getByRole('button', { name: 'Approve', exact: true }));
  const r = await running.done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('edited-marker'), describeRun(r)).toBe(true);
  expect(project.has('original-marker')).toBe(false);
  expect(onlyResult(r).is_error).toBe(false);
  await expect(call).toHaveAttribute('data-state', 'ok');
  // As stored: the command that ran is the edited one.
  await page.reload();
  await expect(toolCard(page, 'Bash').getByLabel('Command', { exact: true })).toHaveText('$ touch edited-marker');
  await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'ok');
});

test('rules: `Bash(git status)` allows without a prompt; `deny Bash(rm:*)` blocks', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e claude rules', 'claude-code');
  // Rules on the agent's tool names, limited to this connection (SPEC §18), so that no other
  // test's calls meet them.
  const when = `session.connection == "${conn.connection.id}"`;
  await addRule(request, { text: 'Bash(git status)', effect: 'allow', scope: 'server', when });
  await addRule(request, { text: 'Bash(rm:*)', effect: 'deny', scope: 'server', when });

  // Allowed by the rule: it runs with nobody deciding. Both runs at once; each ends on its own.
  const allowed = claudeProject('cc-rule-allow', claudeSettings(conn.snippet), fakeModel, conn.token);
  const denied = claudeProject('cc-rule-deny', claudeSettings(conn.snippet), fakeModel, conn.token);
  const [a, d] = await Promise.all([runClaude(allowed, bashPrompt('git status')).done, runClaude(denied, bashPrompt('rm README.md')).done]);
  expect(a.code, describeRun(a)).toBe(0);
  const ar = onlyResult(a);
  expect(ar.is_error, describeRun(a)).toBe(false);
  expect(ar.content).toContain('On branch main');

  // Blocked by the rule: the file stays; the model is told why.
  expect(d.code, describeRun(d)).toBe(0);
  expect(denied.has('README.md'), describeRun(d)).toBe(true);
  const dr = onlyResult(d);
  expect(dr.is_error).toBe(true);
  expect(dr.content).toContain('Bash(rm:*)');

  // Neither asked a person; each agent session's page shows the call decided by its rule.
  await login(page);
  for (const [p, says] of [[allowed, 'approved automatically (rule): rule Bash(git status) allows git status'], [denied, 'denied automatically (rule): rule Bash(rm:*) denies rm README.md']] as const) {
    await page.goto('/');
    await page.getByRole('link', { name: `Claude Code · ${p.name}`, exact: true }).click();
    const call = toolCard(page, 'Bash');
    await expect(call).toContainText(says);
    await expect(approvalGroup(call, 'Bash')).toHaveCount(0);
  }
  // The denied call never ran: blocked, as a rule's denial of Countersign's own calls shows.
  await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'blocked');
  // The allowed call ran: its outcome (PostToolUse) is on the card.
  await page.goto('/');
  await page.getByRole('link', { name: `Claude Code · ${allowed.name}`, exact: true }).click();
  await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'ok');
  await expect(toolCard(page, 'Bash')).toContainText('On branch main');
});

test('nobody decides within the hook timeout: no verdict before it, the page says the agent stopped waiting, a later Approve is too late', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e claude timeout', 'claude-code');
  // The snippet's hook timeout lowered to 8 s: Countersign answers 5 s before it, with no verdict.
  const project = claudeProject('cc-timeout', withHookTimeout(claudeSettings(conn.snippet), 8), fakeModel, conn.token);
  const command = 'touch late-marker';
  const running = runClaude(project, bashPrompt(command));

  await login(page);
  const call = await openHeldCall(page, command);
  const r = await running.done;
  // Headless Claude Code with no verdict denies on its own (its PermissionRequest, asked next,
  // waits on the same call and gets no verdict either).
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('late-marker')).toBe(false);
  expect(onlyResult(r).is_error).toBe(true);
  // Each of the two waiting hooks was answered — successfully, with no decision — before its 8 s
  // (Countersign answers at the deadline minus its margin, half the timeout below 10 s: 4 s).
  for (const event of ['PreToolUse', 'PermissionRequest']) {
    const started = r.timed.find(({ e }) => e.subtype === 'hook_started' && e.hook_event === event);
    expect(started, `${event} hook started\n${describeRun(r)}`).toBeTruthy();
    const answered = r.timed.find(({ e }) => e.subtype === 'hook_response' && e.hook_id === started!.e.hook_id)!;
    expect(answered.e.outcome, describeRun(r)).toBe('success');
    expect(answered.e.output ?? '').not.toMatch(/permissionDecision|behavior/);
    const waited = answered.at - started!.at;
    expect(waited, `${event} answered after ${waited} ms`).toBeGreaterThan(3_000);
    expect(waited, `${event} answered after ${waited} ms`).toBeLessThan(7_500);
  }

  await expect(call).toContainText(/the agent stopped waiting/i);
  await decide(approvalGroup(call, 'Bash').getByRole('button', { name: 'Approve', exact: true }));
  await expect(call).toContainText(/too late/);
  await page.reload();
  await expect(toolCard(page, 'Bash')).toContainText('approved by owner — too late — not applied (the agent had stopped waiting)');
  expect(project.has('late-marker')).toBe(false);
});

test.describe('a webhook decision link', () => {
  test('acceptance 4: opened at 390 px, it approves an outside call and the command runs', async ({ browser, page, request, fakeModel }, info) => {
    const recv = await Receiver.start();
    const name = `cc-webhook-${info.workerIndex}`;
    fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
    const srv = await startOwnServer(name, 0, ['-notify-webhook', `alice=${recv.url}/hook`]);
    try {
      const conn = await createConnection(request, 'e2e claude webhook', 'claude-code', srv.baseURL);
      const project = claudeProject('cc-webhook', claudeSettings(conn.snippet), fakeModel, conn.token);
      const command = 'touch phone-marker';
      const running = runClaude(project, bashPrompt(command));

      const hit = await recv.waitFor((h) => h.json.type === 'approval.requested');
      expect(hit.json.data.approval.toolName).toBe('Bash');
      expect(hit.json.data.summary.command).toBe(command);
      const link: string = hit.json.data.links.decision;
      expect(link).toMatch(new RegExp(`^${srv.baseURL}/d/[a-z2-7]{32}$`));

      const phoneCtx = await browser.newContext({ viewport: { width: 390, height: 844 } });
      const phone = await phoneCtx.newPage();
      await phone.goto(link);
      const prompt = phone.getByRole('group', { name: 'Approval required: Bash', exact: true });
      await expect(prompt).toContainText(command);
      expect(await phone.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await phone.getByRole('button', { name: 'Approve', exact: true }).click();
      await expect(phone.getByRole('status')).toContainText('approved by alice');

      const r = await running.done;
      expect(project.has('phone-marker'), describeRun(r)).toBe(true);
      expect(onlyResult(r).is_error).toBe(false);
      await phoneCtx.close();

      // The owner's page of the agent session the webhook named: approved by alice, ran.
      await loginAt(page, srv.baseURL);
      await page.goto(`${srv.baseURL}/sessions/${hit.json.data.session.id}`);
      await expect(page.getByRole('region', { name: 'Agent', exact: true })).toContainText(project.dir);
      await expect(toolCard(page, 'Bash')).toContainText('approved by alice');
      await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'ok');
    } finally {
      await srv.kill();
      await recv.close();
    }
  });
});
