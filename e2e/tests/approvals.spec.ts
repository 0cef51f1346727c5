import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import {
  OWNER_TOKEN, approvalGroup, expectFinalText, login, loginAt, newSession, ownPortBase, send, startOwnServer,
  toolCard, transcript, workspace,
} from './helpers';

// SPEC §3 and §8: approvals that hold under parallel calls, grants, busy runs, timeouts and
// restarts.

function cardById(page: Page, id: string) {
  return transcript(page).locator(`[data-tool-call-id="${id}"]`);
}

test('three parallel write_file calls pair with decisions made in any order', async ({ page }) => {
  await login(page);
  await newSession(page, 'parallel', 'faux:parallel');
  await send(page, 'Write the three files.');
  const groups = page.getByRole('group', { name: 'Approval required: write_file', exact: true });
  // Every prompt of the batch is shown at once.
  await expect(groups).toHaveCount(3);
  const decide = async (id: string, button: string, reason = '') => {
    const g = approvalGroup(cardById(page, id), 'write_file');
    if (reason) await g.getByRole('textbox', { name: 'Reason', exact: true }).fill(reason);
    await g.getByRole('button', { name: button, exact: true }).click();
    await expect(g).toBeHidden();
  };
  await decide('w3', 'Approve');
  await decide('w1', 'Deny', 'not this one');
  await decide('w2', 'Approve');
  await expectFinalText(page, 'Parallel writes finished.');
  expect(fs.existsSync(path.join(workspace, 'parallel/file-1.txt'))).toBe(false);
  expect(fs.readFileSync(path.join(workspace, 'parallel/file-2.txt'), 'utf8')).toBe('two\n');
  expect(fs.readFileSync(path.join(workspace, 'parallel/file-3.txt'), 'utf8')).toBe('three\n');
  await expect(cardById(page, 'w1')).toContainText('Denied by owner: not this one');
  await expect(cardById(page, 'w2')).toContainText('approved by owner');
  await expect(cardById(page, 'w3')).toContainText('approved by owner');
});

// "Approve for session" on run_command saves the narrowed rule "Always allow…" suggests, scoped to
// the session (SPEC §3, issue 34): on `echo grant two` that is run_command(echo grant:*), which
// releases the other `echo grant …` calls and lets the fourth through, never every command.
test('"Approve for session" releases the pending calls its narrowed rule covers and skips later prompts', async ({ page }) => {
  await login(page);
  await newSession(page, 'grant', 'faux:grant');
  await send(page, 'Run the commands.');
  const groups = page.getByRole('group', { name: 'Approval required: run_command', exact: true });
  await expect(groups).toHaveCount(3);
  await approvalGroup(cardById(page, 'g2'), 'run_command').getByRole('button', { name: 'Approve for session', exact: true }).click();
  await expectFinalText(page, 'All four commands ran.');
  for (const id of ['g1', 'g2', 'g3', 'g4']) {
    await expect(cardById(page, id)).toContainText(`grant ${['one', 'two', 'three', 'four'][Number(id[1]) - 1]}`);
  }
  await expect(groups).toHaveCount(0);
  // The audit: one human decision and three automatic ones.
  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const rows = page.getByRole('table').getByRole('row');
  await expect(rows).toHaveCount(5); // header + 4 gated calls
  await expect(page.getByRole('row').filter({ hasText: '(human)' })).toHaveCount(1);
  await expect(page.getByRole('row').filter({ hasText: '(automatic)' })).toHaveCount(3);
  await expect(page.getByRole('row').filter({ hasText: '(automatic)' }).filter({ hasText: 'run_command(echo grant:*)' })).toHaveCount(3);
});

test('a message sent while the run is busy is refused and stays in the box', async ({ page }) => {
  await login(page);
  await newSession(page, 'busy', 'faux:deny');
  await send(page, 'Start something.');
  await expect(page.getByRole('group', { name: 'Approval required: run_command', exact: true })).toBeVisible();
  const box = page.getByRole('textbox', { name: 'Message', exact: true });
  await box.fill('Are you done yet?');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await expect(page.getByRole('alert')).toContainText('A run is already in progress');
  await expect(box).toHaveValue('Are you done yet?');
});

test('an approval that waits past the timeout turns to timed out, and a late decision gets 409', async ({ page }, info) => {
  const srv = await startOwnServer(`timeout-${info.workerIndex}`, ownPortBase + 40 + (info.workerIndex % 10), ['-approval-timeout', '2s', '-db', path.resolve(__dirname, `../.tmp/timeout-${info.workerIndex}/db/${Date.now()}.db`)]);
  try {
    await loginAt(page, srv.baseURL);
    await newSession(page, 'timeout', 'faux:deny');
    await send(page, 'Wait for me.');
    const card = toolCard(page, 'run_command');
    const group = approvalGroup(card, 'run_command');
    await expect(group).toBeVisible();
    const approvalId = await group.getAttribute('data-approval-id');
    await expect(group).toBeHidden({ timeout: 10_000 });
    await expect(card).toContainText('timed out');
    await expect(card).toContainText('Approval timed out');
    const late = await page.request.post(`${srv.baseURL}/api/approvals/${approvalId}/decision`, {
      headers: { Authorization: `Bearer ${OWNER_TOKEN}` }, data: { decision: 'approve' },
    });
    expect(late.status()).toBe(409);
    expect(fs.existsSync(path.join(srv.workspace, 'denied-marker.txt'))).toBe(false);
  } finally {
    await srv.kill();
  }
});

test('restart: a parked approval survives SIGKILL and the run resumes; an executing call is never re-run', async ({ page }, info) => {
  const name = `restart-${info.workerIndex}-${Date.now()}`;
  const port = ownPortBase + info.workerIndex;
  let srv = await startOwnServer(name, port);
  try {
    // 1. Killed while a model-issued approval is pending.
    await loginAt(page, srv.baseURL);
    const parkedURL = `${srv.baseURL}/sessions/${await newSession(page, 'parked', 'faux:counter')}`;
    await send(page, 'Count once.');
    await expect(approvalGroup(toolCard(page, 'fixture_counter'), 'fixture_counter')).toBeVisible();
    await srv.kill('SIGKILL');
    srv = await startOwnServer(name, port);
    await page.goto(parkedURL);
    const group = approvalGroup(toolCard(page, 'fixture_counter'), 'fixture_counter');
    await expect(group).toBeVisible();
    await group.getByRole('button', { name: 'Approve', exact: true }).click();
    await expectFinalText(page, 'Resumed and finished.');
    const counter = path.join(srv.workspace, '.countersign-counter');
    expect(fs.readFileSync(counter, 'utf8').trim().split('\n')).toEqual(['k1']);

    // 2. Killed while the tool runs.
    const runningURL = `${srv.baseURL}/sessions/${await newSession(page, 'running', 'faux:counter-slow')}`;
    await send(page, 'Count slowly.');
    const slow = toolCard(page, 'fixture_counter');
    await approvalGroup(slow, 'fixture_counter').getByRole('button', { name: 'Approve', exact: true }).click();
    await expect(slow).toContainText('running');
    await expect.poll(() => fs.readFileSync(counter, 'utf8').trim().split('\n').length).toBe(2);
    await srv.kill('SIGKILL');
    srv = await startOwnServer(name, port);
    await page.goto(runningURL);
    await expect(toolCard(page, 'fixture_counter')).toContainText('Interrupted by server restart');
    // Not re-run: still two lines (one per session), and the session accepts messages.
    expect(fs.readFileSync(counter, 'utf8').trim().split('\n')).toHaveLength(2);
    await expect(page.getByRole('button', { name: 'Stop', exact: true })).toBeHidden();
  } finally {
    await srv.kill();
  }
});

test('Stop during a pending approval cancels it; the call never runs', async ({ page }) => {
  await login(page);
  await newSession(page, 'stop', 'faux:deny');
  await send(page, 'Make the marker.');
  const card = toolCard(page, 'run_command');
  await expect(approvalGroup(card, 'run_command')).toBeVisible();
  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await expect(approvalGroup(card, 'run_command')).toBeHidden();
  await expect(card).toContainText('cancelled');
  await expect(card).toContainText('Run stopped by owner');
  await expect(page.getByRole('button', { name: 'Stop', exact: true })).toBeHidden();
  expect(fs.existsSync(path.join(workspace, 'denied-marker.txt'))).toBe(false);
});
