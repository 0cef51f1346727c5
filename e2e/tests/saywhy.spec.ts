import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, test, type Page, type Route } from '@playwright/test';
import {
  approvalGroup, expectFinalText, login, loginAt, newSession, ownPortBase, send, startOwnServer, toolCard, transcript,
} from './helpers';

// Issue 16, item 5: say why. A prompt says why it asks (an untrusted MCP server); a restart says
// what happened to the call it cut and how long that call ran; the losing tab of a race says how
// the approval ended and who decided it, whichever of its answer and the live update comes first.

test('item 5, say why: an untrusted MCP server\'s tool asks "because server files is not trusted", in the prompt and in the audit', async ({ page }, info) => {
  // `make e2e` builds internal/mcp/testdata/stdioserver (target mcp-testserver).
  const stdioserver = path.resolve(__dirname, '../../bin/mcp-stdioserver');
  expect(fs.existsSync(stdioserver), `${stdioserver} is missing: run make e2e (or make mcp-testserver)`).toBe(true);
  const name = `mcp-${info.workerIndex}-${Date.now()}`;
  const root = path.resolve(__dirname, '../.tmp', name);
  fs.mkdirSync(root, { recursive: true });
  const config = path.join(root, 'mcp.json');
  // Not marked trusted: its tools' annotations are shown but not believed (SPEC §13). Its echo
  // tool says readOnlyHint true, which alone would let it run without a prompt.
  fs.writeFileSync(config, JSON.stringify({ mcpServers: { files: { command: stdioserver } } }));
  const srv = await startOwnServer(name, ownPortBase + 70 + info.workerIndex, ['-mcp-config', config]);
  try {
    await loginAt(page, srv.baseURL);
    await newSession(page, 'untrusted MCP', 'faux:mcp-echo');
    const tools = page.getByRole('group', { name: 'Tools', exact: true });
    await expect(tools.getByRole('checkbox', { name: 'files__echo', exact: true })).toBeChecked();
    await send(page, 'Echo something.');
    const card = toolCard(page, 'files__echo');
    const group = approvalGroup(card, 'files__echo');
    await expect(group).toBeVisible();
    await expect(group).toContainText('asks because server files is not trusted');
    await group.getByRole('button', { name: 'Approve', exact: true }).click();
    await expectFinalText(page, 'The echo came back.');
    await expect(card).toContainText('echo: hello from the model');

    await page.getByRole('link', { name: 'Audit', exact: true }).click();
    const row = page.getByRole('row').filter({ hasText: 'files__echo' });
    await expect(row).toContainText('asked because server files is not trusted');
  } finally {
    await srv.kill();
  }
});

test('item 5, say why: after a restart the page says the server restarted while the tool was running, that it was not re-run and how long it ran; a cut answer says the server restarted', async ({ page }, info) => {
  const name = `saywhy-restart-${info.workerIndex}-${Date.now()}`;
  const port = ownPortBase + 60 + info.workerIndex;
  let srv = await startOwnServer(name, port);
  try {
    await loginAt(page, srv.baseURL);
    // A call that is executing when the server dies.
    const runningURL = `${srv.baseURL}/sessions/${await newSession(page, 'running call', 'faux:counter-slow')}`;
    await send(page, 'Count slowly.');
    const slow = toolCard(page, 'fixture_counter');
    await approvalGroup(slow, 'fixture_counter').getByRole('button', { name: 'Approve', exact: true }).click();
    await expect(slow).toContainText('running');
    const counter = path.join(srv.workspace, '.countersign-counter');
    await expect.poll(() => fs.existsSync(counter) && fs.readFileSync(counter, 'utf8').trim() !== '').toBe(true);
    // A model that is still to answer when the server dies.
    const streamingURL = `${srv.baseURL}/sessions/${await newSession(page, 'cut answer', 'faux:slow-answer')}`;
    await send(page, 'Take your time.');
    await expect(page.getByRole('button', { name: 'Stop', exact: true })).toBeVisible();

    await srv.kill('SIGKILL');
    srv = await startOwnServer(name, port);

    await page.goto(runningURL);
    const card = toolCard(page, 'fixture_counter');
    await expect(card).toContainText('The server restarted while fixture_counter was running; it was not re-run.');
    await expect(card).toContainText(/It ran for \d+(\.\d)? s \(from its start to the restart\)\./);
    await expect(card).toContainText('interrupted');
    await expect(page.getByRole('button', { name: 'Stop', exact: true })).toBeHidden();

    await page.goto(streamingURL);
    await expect(transcript(page)).toContainText('The server restarted before the model answered');
    for (const url of [runningURL, streamingURL]) {
      await page.goto(url);
      await expect(transcript(page)).toBeVisible();
      await expect(transcript(page)).not.toContainText('before the model finished');
      await expect(transcript(page)).not.toContainText('the record is bounded');
    }
  } finally {
    await srv.kill();
  }
});

/**
 * Two owner pages of one new session, both showing its pending run_command prompt (a harmless
 * `echo hello`: the suite's workspace is shared).
 */
async function twoPagesOnOnePrompt(page: Page, title: string) {
  await login(page);
  await newSession(page, title, 'faux:race');
  await send(page, 'Say hello.');
  const other = await page.context().newPage();
  await other.goto(page.url());
  const mine = approvalGroup(toolCard(page, 'run_command'), 'run_command');
  const theirs = approvalGroup(toolCard(other, 'run_command'), 'run_command');
  await expect(mine).toBeVisible();
  await expect(theirs).toBeVisible();
  return { other, mine, theirs };
}

test('item 5, say why: the losing tab of a race says "Your decision was not applied: already approved by owner" when the live update lands before its answer', async ({ page }) => {
  const { other, mine, theirs } = await twoPagesOnOnePrompt(page, 'race, live first');
  const card = toolCard(page, 'run_command');
  // Hold this page's decision on its way to the server until the other page has won and this
  // page's live update has replaced the form.
  let held: Route | undefined;
  await page.route('**/approvals/*/decision', (route) => { held = route; });
  await mine.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect.poll(() => held !== undefined).toBe(true);
  await theirs.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(mine).toBeHidden();
  await expect(card).toContainText('approved by owner');
  await held!.continue();
  await expect(card.getByRole('alert')).toHaveText('Your decision was not applied: already approved by owner');
  await other.close();
});

test('item 5, say why: the losing tab of a race keeps "Your decision was not applied: already denied by owner" when the live update lands after its answer, and across a reconnect', async ({ page }) => {
  const { other, mine, theirs } = await twoPagesOnOnePrompt(page, 'race, answer first');
  const card = toolCard(page, 'run_command');
  // Hold this page's live updates (the socket stays open) while the other page wins and this
  // page decides too, then let them through.
  let holding = false;
  let received = 0;
  const queued: (string | Buffer)[] = [];
  let toPage: ((m: string | Buffer) => void) | undefined;
  let cut: (() => Promise<void>) | undefined;
  await page.routeWebSocket(/\/live$/, (ws) => {
    const server = ws.connectToServer();
    toPage = (m) => ws.send(m);
    cut = () => ws.close({ code: 1012, reason: 'test: cut the connection' });
    server.onMessage((m) => {
      received++;
      if (holding) queued.push(m);
      else ws.send(m);
    });
  });
  // The route applies to sockets opened from now on: reconnect through it, and let the first
  // message (the socket's resync of the whole transcript) through before holding.
  await page.reload();
  await expect(mine).toBeVisible();
  await expect.poll(() => received).toBeGreaterThan(0);
  holding = true;
  await theirs.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(theirs).toBeHidden();
  await mine.getByRole('button', { name: 'Approve', exact: true }).click();
  const notice = card.getByRole('alert');
  await expect(notice).toHaveText('Your decision was not applied: already denied by owner');
  // Now the live updates arrive, the slot among them: the notice stays.
  holding = false;
  for (const m of queued.splice(0)) toPage!(m);
  await expectFinalText(page, 'That was the race.');
  await expect(card).toContainText('denied by owner');
  await expect(notice).toHaveText('Your decision was not applied: already denied by owner');
  // The connection drops and comes back: its resync redraws the transcript; the notice stays.
  const before = received;
  await cut!();
  await expect.poll(() => received, { message: 'the page reconnects and resyncs' }).toBeGreaterThan(before);
  await expect(page.locator('#connection-banner')).toHaveCount(0);
  await expect(notice).toHaveText('Your decision was not applied: already denied by owner');
  await other.close();
});
