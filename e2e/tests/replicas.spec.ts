import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type APIRequestContext, type Browser, type Page, type WebSocket } from '@playwright/test';
import {
  OWNER_TOKEN, approvalGroup, expectFinalText, loginAt, newSession, normalise, ownPortBase, send, startOwnServer,
  toolCard, transcript, type OwnServer,
} from './helpers';

// Issue 21, acceptance 2 and 4 (SPEC §16 "Several replicas on one PostgreSQL"): two servers of
// this file's own, on two ports, share one fresh PostgreSQL database, one share key and one
// workspace, as replicas behind a load balancer would. The owner works on replica A; an approver
// link opened on replica B shows A's prompt live (B relays what A publishes), approving there runs
// the call on A, and both pages end with the same transcript. Then two owners, one on each
// replica, decide the same approvals at once, 50 times: one decision wins each time, the other
// gets 409.
//
// The database server is COUNTERSIGN_TEST_POSTGRES (scripts/with-postgres.sh starts a throwaway
// one and sets it; `make test` runs the suite under it). Without it the file is skipped, saying
// so; under CI=true it fails instead, as the Go PostgreSQL cases do (internal/pgtest).

const serverURL = process.env.COUNTERSIGN_TEST_POSTGRES ?? '';
const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };
const shots = path.resolve(__dirname, '../screenshots');

const skipped = !serverURL && process.env.CI !== 'true';
const skipReason = 'PostgreSQL cases skipped: COUNTERSIGN_TEST_POSTGRES is not set (run under scripts/with-postgres.sh; make test does)';
// The list reporter shows a skipped test without its reason: say it once where the run is read.
if (skipped && !process.env.TEST_WORKER_INDEX) console.log(`replicas.spec.ts: ${skipReason}`);
test.skip(skipped, skipReason);

// Two servers and one database for the file: its tests run one after another in one worker.
test.describe.configure({ mode: 'default' });

/** psql: on the PATH, else Debian's /usr/lib/postgresql/<version>/bin/psql. */
function psqlPath(): string {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && fs.existsSync(path.join(dir, 'psql'))) return path.join(dir, 'psql');
  }
  const debian = '/usr/lib/postgresql';
  for (const v of fs.existsSync(debian) ? fs.readdirSync(debian).sort().reverse() : []) {
    const p = path.join(debian, v, 'bin', 'psql');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('psql not found (on the PATH or in /usr/lib/postgresql/*/bin): install Debian\'s postgresql-client');
}

/** Runs one SQL statement on the test server's maintenance database. */
function psql(sql: string): void {
  execFileSync(psqlPath(), [serverURL, '-v', 'ON_ERROR_STOP=1', '-q', '-c', sql], { stdio: ['ignore', 'ignore', 'pipe'] });
}

let dbName = '';
let a: OwnServer;
let b: OwnServer;
let workspace = '';

test.beforeAll(async ({}, info) => {
  if (!serverURL) {
    throw new Error('COUNTERSIGN_TEST_POSTGRES is not set under CI=true: CI must run the PostgreSQL cases (make test starts a cluster with scripts/with-postgres.sh)');
  }
  // A fresh database for this file (and for each worker that runs it, after a failure too).
  dbName = `e2e_replicas_${info.workerIndex}_${Date.now()}`;
  psql(`CREATE DATABASE ${dbName}`);
  const dbURL = new URL(serverURL);
  dbURL.pathname = `/${dbName}`;

  const root = path.resolve(__dirname, '../.tmp', `replicas-${info.workerIndex}`);
  fs.rmSync(root, { recursive: true, force: true });
  workspace = path.join(root, 'workspace');
  fs.mkdirSync(workspace, { recursive: true });
  fs.mkdirSync(path.join(root, 'keys'), { recursive: true });
  // Same database, same share key, same workspace: what replicas must share (SPEC §7, §16).
  // Later flags win over startOwnServer's own -db and -workspace.
  const shared = ['-db', dbURL.href, '-share-key', path.join(root, 'keys', 'share-key'), '-workspace', workspace];
  const port = ownPortBase + 110 + (info.workerIndex % 10) * 2;
  // One after the other: A creates the share key file and applies the migrations, B finds both.
  a = await startOwnServer(`replicas-${info.workerIndex}/a`, port, shared);
  b = await startOwnServer(`replicas-${info.workerIndex}/b`, port + 1, shared);
});

test.afterAll(async () => {
  await a?.kill();
  await b?.kill();
  if (dbName) psql(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
});

/** A new browser context logged in as the owner on `baseURL`, on its session list. */
async function ownerOn(browser: Browser, baseURL: string): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  await loginAt(page, baseURL);
  return page;
}

/** Creates an approver link for `person` from the owner's share panel; returns its URL. */
async function approverLink(owner: Page, label: string, person: string): Promise<string> {
  const panel = owner.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await panel.getByRole('textbox', { name: 'For', exact: true }).fill(person);
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: label });
  await expect(item).toContainText(`for ${person}`);
  return (await item.getByRole('link', { name: /\/r\// }).textContent())!.trim();
}

/** The value of a counter series in a /metrics scrape (0 when the series is absent). */
async function metric(request: APIRequestContext, baseURL: string, series: RegExp): Promise<number> {
  const res = await request.get(`${baseURL}/metrics`, { headers: auth });
  expect(res.status()).toBe(200);
  let sum = 0;
  for (const line of (await res.text()).split('\n')) {
    const m = /^(\S+) (\S+)$/.exec(line);
    if (m && series.test(m[1])) sum += Number(m[2]);
  }
  return sum;
}

test('acceptance 2: an approver link on replica B shows the prompt of a run on replica A live; approving on B runs the call on A once; both transcripts end identical', async ({ browser, request }) => {
  const owner = await ownerOn(browser, a.baseURL);
  const sid = await newSession(owner, 'Across replicas', 'faux:replicas');
  const link = await approverLink(owner, 'on replica B', 'bob');
  expect(link.startsWith(a.baseURL), `the link names the replica it was made on: ${link}`).toBe(true);
  const linkOnB = b.baseURL + new URL(link).pathname;

  // The approver opens the link on replica B and its live socket (not the inbox's) syncs before
  // anything happens on A: the prompt can then reach B's page only through B's relay.
  const reviewer = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  const sockets: WebSocket[] = [];
  let synced = false;
  reviewer.on('websocket', (ws) => {
    if (!/\/r\/[^/]+\/live$/.test(ws.url())) return;
    sockets.push(ws);
    ws.on('framereceived', () => { synced = true; });
  });
  await reviewer.goto(linkOnB);
  await expect(reviewer.getByText('Signed in as bob.')).toBeVisible();
  await expect.poll(() => synced, { message: "the link page's live socket on B got its first frame" }).toBe(true);
  await reviewer.evaluate(() => { (window as unknown as { notReloaded: boolean }).notReloaded = true; });
  const reviewerGroup = approvalGroup(toolCard(reviewer, 'run_command'), 'run_command');
  await expect(reviewerGroup).toHaveCount(0);

  // The owner sends on A; A drives the run and parks the call on its prompt.
  await send(owner, 'Add a line to the counter.');
  const ownerGroup = approvalGroup(toolCard(owner, 'run_command'), 'run_command');
  await expect(ownerGroup).toBeVisible();

  // B's page shows the prompt live: same page, same socket, no reload.
  await expect(reviewerGroup).toBeVisible();
  await expect(reviewerGroup).toContainText('echo counted >> replicas-counter.txt');
  expect(await reviewer.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
  expect(sockets.length, 'one live socket on B, never reopened').toBe(1);
  expect(fs.existsSync(path.join(workspace, 'replicas-counter.txt')), 'nothing ran before the decision').toBe(false);

  // Look at B's page with the live prompt, wide and at phone width.
  fs.mkdirSync(shots, { recursive: true });
  for (const width of [1280, 390]) {
    await reviewer.setViewportSize({ width, height: width === 390 ? 844 : 800 });
    await reviewerGroup.scrollIntoViewIfNeeded();
    await reviewer.screenshot({ path: path.join(shots, `replicas-b-live-prompt-${width}.png`) });
    expect(await reviewer.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth),
      `nothing scrolls sideways at ${width} px`).toBeLessThanOrEqual(0);
  }
  await reviewer.setViewportSize({ width: 1280, height: 800 });

  // Approving on B runs the call on A: the decision is stored on B and wakes the call waiting on A.
  const ranOn = /^countersign_tool_calls_total\{.*tool="run_command".*\}$/;
  const ranBefore = [await metric(request, a.baseURL, ranOn), await metric(request, b.baseURL, ranOn)];
  await reviewerGroup.getByRole('button', { name: 'Approve', exact: true }).click();
  for (const p of [owner, reviewer]) {
    await expect(toolCard(p, 'run_command')).toContainText('approved by bob');
    await expectFinalText(p, 'The counter has one more line.');
  }
  expect(fs.readFileSync(path.join(workspace, 'replicas-counter.txt'), 'utf8'), 'the call ran exactly once').toBe('counted\n');
  // It ran on A, the replica driving the run: A counted the call, B did not.
  expect(await metric(request, a.baseURL, ranOn) - ranBefore[0], 'run_command calls counted on A').toBe(1);
  expect(await metric(request, b.baseURL, ranOn) - ranBefore[1], 'run_command calls counted on B').toBe(0);
  expect(sockets.length, 'still one live socket on B').toBe(1);

  // After a reload (each page rendered from the store by its own replica) the transcripts match.
  await owner.reload();
  await reviewer.reload();
  await expectFinalText(owner, 'The counter has one more line.');
  await expectFinalText(reviewer, 'The counter has one more line.');
  const text = async (p: Page) => normalise((await transcript(p).textContent()) ?? '');
  const onA = await text(owner);
  expect(onA).toContain('Add a line to the counter.');
  expect(onA).toContain('approved by bob');
  expect(await text(reviewer), 'the transcript on B (approver link) equals the one on A').toBe(onA);
  // And the owner's own page of the session, served by B, is the owner's page served by A.
  await owner.goto(`${b.baseURL}/sessions/${sid}`);
  await expectFinalText(owner, 'The counter has one more line.');
  expect(await text(owner), "the owner's page on B equals the one on A").toBe(onA);
});

/** Decides approval `aid` through the JSON API from `page`'s own context (its login cookie). */
function decideFrom(page: Page, aid: string, decision: 'approve' | 'deny'): Promise<{ status: number; body: string }> {
  return page.evaluate(async ({ aid, decision }) => {
    const res = await fetch(`/api/approvals/${aid}/decision`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ decision }),
    });
    return { status: res.status, body: await res.text() };
  }, { aid, decision });
}

/** Starts `n` runs of faux:replicas-race on A through the API; returns each one's session and pending approval. */
async function pendingApprovals(request: APIRequestContext, n: number): Promise<{ sid: string; aid: string }[]> {
  return Promise.all(Array.from({ length: n }, async (_, i) => {
    const created = await request.post(`${a.baseURL}/api/sessions`, { headers: auth, data: { title: `race ${i}`, model: 'faux:replicas-race' } });
    expect(created.status(), await created.text()).toBe(201);
    const sid: string = (await created.json()).id;
    const sent = await request.post(`${a.baseURL}/api/sessions/${sid}/messages`, { headers: auth, data: { text: 'Race.' } });
    expect(sent.status(), await sent.text()).toBe(202);
    let aid = '';
    await expect.poll(async () => {
      aid = (await approvals(request, a, sid)).find((x) => x.status === 'pending')?.id ?? '';
      return aid;
    }, { message: `session ${sid} parks on its prompt` }).not.toBe('');
    return { sid, aid };
  }));
}

/** A session's approvals as replica `srv` reads them. */
async function approvals(request: APIRequestContext, srv: OwnServer, sid: string): Promise<{ id: string; status: string }[]> {
  const res = await request.get(`${srv.baseURL}/api/sessions/${sid}/approvals`, { headers: auth });
  expect(res.status(), await res.text()).toBe(200);
  return (await res.json()).approvals;
}

/** Lines of the race counter file in the shared workspace. */
function raceLines(): number {
  const file = path.join(workspace, 'replicas-race.txt');
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).length : 0;
}

test('acceptance 4: owners on A and on B decide the same approval at once, 50 times: one decision wins each time, the other gets 409', async ({ browser, request }) => {
  const onA = await ownerOn(browser, a.baseURL);
  const onB = await ownerOn(browser, b.baseURL);
  const before = raceLines();
  const races = await pendingApprovals(request, 50);

  const wins = { a: 0, b: 0 };
  for (const { sid, aid } of races) {
    // A approves, B denies, at the same moment: the outcome says whose decision won.
    const [ra, rb] = await Promise.all([decideFrom(onA, aid, 'approve'), decideFrom(onB, aid, 'deny')]);
    const why = `approval ${aid} (A: ${ra.status} ${ra.body}; B: ${rb.status} ${rb.body})`;
    expect([ra.status, rb.status].sort(), `${why}: one 200 and one 409`).toEqual([200, 409]);
    const won = ra.status === 200 ? 'approved' : 'denied';
    wins[ra.status === 200 ? 'a' : 'b']++;
    expect(JSON.parse((ra.status === 200 ? ra : rb).body).status, why).toBe(won);
    expect((ra.status === 200 ? rb : ra).body, `${why}: the 409 says how it ended`).toContain(`already resolved: ${won} by owner`);
    // Both replicas read the one outcome, the winner's.
    for (const srv of [a, b]) {
      expect((await approvals(request, srv, sid)).map((x) => x.status), `${why}, read on ${srv.baseURL}`).toEqual([won]);
    }
  }
  const tally = `A (approve) won ${wins.a}, B (deny) won ${wins.b} of 50`;
  test.info().annotations.push({ type: 'winners', description: tally });
  console.log(`replicas.spec.ts: ${tally}`);

  // Every approval A won ran its call once, and no denied one ran: one counter line each.
  await expect.poll(() => raceLines() - before, { message: 'one counter line per approval won' }).toBe(wins.a);
  for (const { sid } of races) {
    await expect.poll(async () => (await (await request.get(`${a.baseURL}/api/sessions/${sid}`, { headers: auth })).json()).state,
      { message: `session ${sid} ends its run` }).toBe('idle');
  }
  expect(raceLines() - before, 'no call ran twice').toBe(wins.a);
});

test('acceptance 4, on the page: owners on A and on B click at once; the losing page says the call was already decided', async ({ browser }) => {
  const pages = [await ownerOn(browser, a.baseURL), await ownerOn(browser, b.baseURL)];
  for (let i = 0; i < 3; i++) {
    const sid = await newSession(pages[0], `page race ${i}`, 'faux:replicas-race');
    await send(pages[0], 'Race.');
    await pages[1].goto(`${b.baseURL}/sessions/${sid}`);
    const groups = pages.map((p) => approvalGroup(toolCard(p, 'run_command'), 'run_command'));
    for (const g of groups) await expect(g).toBeVisible();
    // Each page's form request is held until both are on their way, then both go at once: a
    // live update from the winner cannot take the other form away before it is sent.
    const held: (() => Promise<void>)[] = [];
    for (const p of pages) {
      await p.route('**/approvals/*/decision', (route) => { held.push(() => route.continue()); }, { times: 1 });
    }
    await groups[0].getByRole('button', { name: 'Approve', exact: true }).click();
    await groups[1].getByRole('button', { name: 'Deny', exact: true }).click();
    await expect.poll(() => held.length, { message: 'both decisions are on their way' }).toBe(2);
    await Promise.all(held.map((go) => go()));

    for (const p of pages) await expectFinalText(p, 'The race is over.');
    const cards = pages.map((p) => toolCard(p, 'run_command'));
    const outcome = (await cards[0].textContent())!.includes('approved by owner') ? 'approved by owner' : 'denied by owner';
    for (const c of cards) await expect(c).toContainText(outcome);
    // Exactly one page lost, and says so; the winner's page has no such notice.
    const loser = outcome === 'approved by owner' ? 1 : 0;
    await expect(cards[loser].getByRole('alert')).toHaveText(`Your decision was not applied: already ${outcome}`);
    await expect(cards[1 - loser].getByRole('alert')).toHaveCount(0);
  }
});
