import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, type Page } from '@playwright/test';
import { approvalGroup, login, startOwnServer, toolCard } from './helpers';
import {
  bashPrompt, codexCommands, decide, codexProject, createConnection, describe as describeRun, finalText, requireAgents,
  runCodex, test,
} from './real-agents';

// Issue 30, acceptance 3: the real Codex 0.169.0, headless and offline (`codex exec --json
// --approve-for-me --dangerously-bypass-hook-trust`), against bin/fakemodel's fake Responses API,
// with a codex connection's snippet (hooks that run `countersign-hook hook --agent codex`,
// bin/countersign-hook first on the agent's PATH) in ~/.codex/config.toml. Codex's guardian (the
// model's reviewer, which decides when a hook gives no verdict) is told by the prompt what to
// answer: deny where only Countersign's allow may run the command, allow where only Countersign's
// deny (or --fail-closed) may stop it.

test.beforeEach(() => requireAgents('codex'));

/** The held call of `command` in the inbox; follows its link to the agent session's page and returns the call's card. */
async function openHeldCall(page: Page, command: string) {
  await page.goto('/inbox');
  const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: command });
  await expect(card).toHaveCount(1, { timeout: 30_000 });
  const href = await card.getByRole('link').first().getAttribute('href');
  await page.goto(href!);
  const call = toolCard(page, 'Bash');
  await expect(call).toContainText(command);
  return call;
}

test('approved in the browser: the command runs', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e codex approve', 'codex');
  const project = codexProject('cx-approve', conn.snippet, fakeModel, conn.token);
  const command = 'touch codex-approved-marker';
  // The guardian denies: only Countersign's allow runs the command.
  const running = runCodex(project, bashPrompt(command, 'fake-guardian: deny'));

  await login(page);
  const call = await openHeldCall(page, command);
  // Provenance: the agent and its working directory, Codex's session (thread) id.
  const agent = page.getByRole('region', { name: 'Agent', exact: true });
  await expect(agent).toContainText('codex');
  await expect(agent).toContainText(project.dir);
  const thread = await running.event((e) => e.type === 'thread.started');
  await expect(agent).toContainText(thread.thread_id);
  expect(project.has('codex-approved-marker')).toBe(false);
  await decide(approvalGroup(call, 'Bash').getByRole('button', { name: 'Approve', exact: true }));

  const r = await running.done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('codex-approved-marker'), describeRun(r)).toBe(true);
  const cmds = codexCommands(r);
  expect(cmds, describeRun(r)).toHaveLength(1);
  expect(cmds[0].status).toBe('completed');
  expect(cmds[0].exit_code).toBe(0);
  await expect(call).toHaveAttribute('data-state', 'ok');
  // As stored (a reload): the command, who approved it, that it ran.
  await page.reload();
  const stored = toolCard(page, 'Bash');
  await expect(stored.getByLabel('Command', { exact: true })).toHaveText(`$ ${command}`);
  await expect(stored).toContainText('approved by owner');
  await expect(stored).toHaveAttribute('data-state', 'ok');
});

test('denied with a reason in the browser: the command does not run and Codex tells the model why', async ({ page, request, fakeModel }) => {
  const conn = await createConnection(request, 'e2e codex deny', 'codex');
  const project = codexProject('cx-deny', conn.snippet, fakeModel, conn.token);
  const command = 'touch codex-denied-marker';
  // The guardian would allow: only Countersign's deny stops the command.
  const running = runCodex(project, bashPrompt(command, 'fake-guardian: allow'));

  await login(page);
  const call = await openHeldCall(page, command);
  const group = approvalGroup(call, 'Bash');
  await group.getByRole('textbox', { name: 'Reason', exact: true }).fill('codex may not today');
  await decide(group.getByRole('button', { name: 'Deny', exact: true }));

  const r = await running.done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('codex-denied-marker'), describeRun(r)).toBe(false);
  expect(finalText(r), describeRun(r)).toContain('codex may not today');
  await expect(call).toContainText('denied by owner: codex may not today');
  await page.reload();
  await expect(toolCard(page, 'Bash')).toContainText('denied by owner: codex may not today');
  await expect(toolCard(page, 'Bash')).toHaveAttribute('data-state', 'denied');
});

test('--fail-closed with the Countersign server stopped: the command does not run', async ({ request, fakeModel }, info) => {
  // A server of its own, stopped after the connection is made: the suite's server stays up.
  const name = `cx-failclosed-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  const srv = await startOwnServer(name, 0);
  const conn = await createConnection(request, 'e2e codex fail-closed', 'codex', srv.baseURL);
  await srv.kill();
  // The snippet offers --fail-closed (in a comment) for the two hooks that wait for a person.
  expect(conn.snippet).toMatch(/^#.*--fail-closed/m);
  const snippet = conn.snippet.replace(/^(command = ".*--timeout 600)"$/gm, '$1 --fail-closed"');
  expect(snippet.match(/^command = ".*--fail-closed"$/gm), snippet).toHaveLength(2);
  const project = codexProject('cx-failclosed', snippet, fakeModel, conn.token);
  const command = 'touch codex-failclosed-marker';
  // The guardian would allow: only the hook's exit 2 stops the command.
  const r = await runCodex(project, bashPrompt(command, 'fake-guardian: allow')).done;
  expect(r.code, describeRun(r)).toBe(0);
  expect(project.has('codex-failclosed-marker'), describeRun(r)).toBe(false);
  expect(finalText(r), describeRun(r)).toContain('--fail-closed');

  // The control: the snippet as given (fails open) lets the guardian run the same command.
  const open = codexProject('cx-failopen', conn.snippet, fakeModel, conn.token);
  const o = await runCodex(open, bashPrompt(command, 'fake-guardian: allow')).done;
  expect(open.has('codex-failclosed-marker'), describeRun(o)).toBe(true);
});
