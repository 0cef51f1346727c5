import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, loginAt, newSession, send, startOwnServer, toolCard, type OwnServer } from './helpers';

// Issue 20, acceptance 3 and 4 (SPEC §15 "Webhooks", "Decision links"): a Countersign server of
// this file's own, started with -notify-webhook pointing at a receiver in this test (Node http),
// signs each event by the Standard Webhooks scheme (checked here with Node's HMAC-SHA256, as the
// scheme specifies: no npm library is installed); the decision link in approval.requested,
// opened in a fresh browser context (no cookie) at phone width, approves the call as the
// recipient, once; a tampered token is a 404; a receiver that answers 500 twice gets three
// attempts, with growing waits, all on the audit page.

/** One request the receiver got. */
interface Hit {
  headers: http.IncomingHttpHeaders;
  body: string;
  json: any;
  at: number;
}

/** A webhook receiver: records every request and answers with the next queued status (200 when none). */
class Receiver {
  hits: Hit[] = [];
  statuses: number[] = [];
  private waiters: (() => void)[] = [];
  private constructor(private server: http.Server, public url: string) {}

  static async start(): Promise<Receiver> {
    let self: Receiver;
    const server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        self.hits.push({ headers: req.headers, body, json: JSON.parse(body), at: Date.now() });
        res.statusCode = self.statuses.shift() ?? 200;
        res.end();
        for (const w of self.waiters.splice(0)) w();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    self = new Receiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return self;
  }

  /**
   * Waits (event-driven, no polling) until `count` requests of event `type` about session `sid`
   * have arrived; returns them.
   */
  async waitFor(type: string, sid: string, count = 1): Promise<Hit[]> {
    for (;;) {
      const got = this.hits.filter((h) => h.json.type === type && h.json.data.session.id === sid);
      if (got.length >= count) return got;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * Standard Webhooks v1: the signature is base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>"))
 * with key the base64 after "whsec_"; webhook-signature lists "v1,<signature>" entries, space separated.
 */
function verify(secret: string, hit: Hit): boolean {
  const id = String(hit.headers['webhook-id']);
  const ts = String(hit.headers['webhook-timestamp']);
  if (Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false;
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const want = crypto.createHmac('sha256', key).update(`${id}.${ts}.${hit.body}`).digest();
  return String(hit.headers['webhook-signature']).split(' ').some((entry) => {
    const [version, sig] = entry.split(',');
    const got = Buffer.from(sig ?? '', 'base64');
    return version === 'v1' && got.length === want.length && crypto.timingSafeEqual(got, want);
  });
}

let recv: Receiver;
let srv: OwnServer;
let secret: string;
const RETRY_BASE_MS = 300;

// One server and receiver for the file: its tests run one after another in one worker.
test.describe.configure({ mode: 'default' });

test.beforeAll(async ({}, info) => {
  recv = await Receiver.start();
  const name = `webhooks-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  srv = await startOwnServer(name, 0, ['-notify-webhook', `alice=${recv.url}/hook`, '-notify-retry-base', `${RETRY_BASE_MS}ms`]);
  // The key lives beside the database (SPEC §15), created on the first start.
  secret = fs.readFileSync(`${srv.dbPath}.notify-key`, 'utf8').trim();
});

test.afterAll(async () => {
  await srv?.kill();
  await recv?.close();
});

test('acceptance 3: a signed approval.requested carries a decision link that approves once, as the recipient, from a phone', async ({ page, browser }) => {
  await loginAt(page, srv.baseURL);
  const sid = await newSession(page, 'Webhook run', 'faux:webhook');
  await send(page, 'Leave a marker.');
  const card = toolCard(page, 'run_command');
  await expect(approvalGroup(card, 'run_command')).toBeVisible();

  const [hit] = await recv.waitFor('approval.requested', sid);
  expect(verify(secret, hit), 'the Standard Webhooks signature verifies').toBe(true);
  expect(verify('whsec_' + Buffer.alloc(32).toString('base64'), hit), 'another key does not').toBe(false);
  const data = hit.json.data;
  expect(data.session).toEqual({ id: sid, title: 'Webhook run' });
  expect(data.approval.toolName).toBe('run_command');
  expect(data.summary.command).toBe('echo webhook-ran > webhook-marker.txt');
  expect(data.recipient).toBe('alice');
  const link: string = data.links.decision;
  expect(link).toMatch(new RegExp(`^${srv.baseURL}/d/[a-z2-7]{32}$`));
  // The owner's prompt says who was sent a decision link (issue 34: who must decide).
  await expect(async () => {
    await page.reload();
    await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command').getByTestId('prompt-who'))
      .toContainText('decision link to alice (sent)', { timeout: 1000 });
  }).toPass();

  // A fresh browser context: no owner cookie. Phone width.
  const phoneCtx = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const phone = await phoneCtx.newPage();
  await phone.goto(link);
  const prompt = phone.getByRole('group', { name: 'Approval required: run_command', exact: true });
  await expect(prompt).toBeVisible();
  await expect(prompt).toContainText('echo webhook-ran > webhook-marker.txt');
  await expect(phone.getByText('Deciding as alice', { exact: false })).toBeVisible();
  await expect(phone.getByRole('button', { name: 'Always allow…' })).toHaveCount(0);
  await expect(phone.getByRole('button', { name: 'Edit', exact: true })).toHaveCount(0);
  // Readable on a phone: nothing wider than the screen.
  expect(await phone.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  await phone.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(phone.getByRole('status')).toContainText('approved by alice');

  // The call ran and the run went on, on the owner's page.
  await expectFinalText(page, 'The marker is in place.');
  expect(fs.readFileSync(path.join(srv.workspace, 'webhook-marker.txt'), 'utf8')).toBe('webhook-ran\n');

  // The audit names the recipient, and lists the deliveries.
  await page.goto(`${srv.baseURL}/sessions/${sid}/audit`);
  const row = page.locator('.audit-table tbody tr').filter({ hasText: 'run_command' });
  await expect(row.locator('td[data-label="By"]')).toContainText('alice');
  await expect(page.getByRole('region', { name: 'Webhook deliveries' })).toContainText('approval.requested');

  // Opening the link again: already used, with the outcome.
  await phone.goto(link);
  await expect(phone.getByRole('status')).toContainText('This link was already used. The call was approved by alice at');
  await expect(phone.getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);

  // A tampered token: 404, no detail.
  const last = link.slice(-1);
  const res = await phone.goto(link.slice(0, -1) + (last === 'a' ? 'b' : 'a'));
  expect(res?.status()).toBe(404);
  await expect(phone.locator('body')).not.toContainText('Webhook run');
  await phoneCtx.close();
});

test('acceptance 4: a receiver answering 500, 500, 200 gets three attempts with growing waits, all on the audit page', async ({ page }) => {
  recv.statuses.push(500, 500);
  await loginAt(page, srv.baseURL);
  const sid = await newSession(page, 'Webhook retries', 'faux:webhook');
  await send(page, 'Leave a marker.');
  // The prompt is up at once: the gate does not wait for the receiver.
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();

  const hits = await recv.waitFor('approval.requested', sid, 3);
  expect(hits.map((h) => h.json.data.approval.id), 'the same event three times').toEqual(Array(3).fill(hits[0].json.data.approval.id));
  for (const h of hits) expect(verify(secret, h)).toBe(true);
  expect(new Set(hits.map((h) => h.headers['webhook-id'])).size, 'one webhook-id across retries').toBe(1);
  expect(hits[1].at - hits[0].at).toBeGreaterThanOrEqual(RETRY_BASE_MS);
  expect(hits[2].at - hits[1].at).toBeGreaterThanOrEqual(2 * RETRY_BASE_MS);

  // The third attempt is stored right after its answer; the audit page is not live, so reload.
  await page.goto(`${srv.baseURL}/sessions/${sid}/audit`);
  const deliveries = page.getByRole('region', { name: 'Webhook deliveries' });
  const attempts = deliveries.locator('tr', { hasText: 'approval.requested' }).locator('.delivery-attempt');
  await expect(async () => {
    await page.reload();
    await expect(attempts).toHaveCount(3, { timeout: 1000 });
  }).toPass();
  await expect(attempts.nth(0)).toContainText('HTTP 500');
  await expect(attempts.nth(1)).toContainText('HTTP 500');
  await expect(attempts.nth(2)).toContainText('HTTP 200');
  await expect(deliveries.locator('tr', { hasText: 'approval.requested' }).locator('.delivery-state')).toHaveText('delivered');
});
