import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { loginAt, OWNER_TOKEN, startOwnServer, type OwnServer } from './helpers';

// Issue 32, acceptance 2 (SPEC §18 Door 3, the Agent Approval Protocol v1): a request created
// through the API shows in the inbox with its tool and arguments; Approve from a decision link
// (SPEC §15) at phone width ends a waiting long poll within 100 ms with approved and an
// expires_at; a denial carries the note. A server of this file's own, with a webhook receiver
// (Node http) that collects the decision links.

interface Hit { json: any }

class Receiver {
  hits: Hit[] = [];
  private waiters: (() => void)[] = [];
  private constructor(private server: http.Server, public url: string) {}
  static async start(): Promise<Receiver> {
    let self: Receiver;
    const server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        self.hits.push({ json: JSON.parse(body) });
        res.statusCode = 200;
        res.end();
        for (const w of self.waiters.splice(0)) w();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    self = new Receiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return self;
  }
  /** The decision link of the approval.requested event whose arguments hold marker. */
  async decisionLink(marker: string): Promise<string> {
    for (;;) {
      const hit = this.hits.find((h) => h.json.type === 'approval.requested' && JSON.stringify(h.json.data ?? {}).includes(marker));
      if (hit) return hit.json.data.links.decision;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

let recv: Receiver;
let srv: OwnServer;
let token: string;

test.describe.configure({ mode: 'default' });

test.beforeAll(async ({}, info) => {
  recv = await Receiver.start();
  const name = `aap-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  srv = await startOwnServer(name, 0, ['-notify-webhook', `alice=${recv.url}/hook`]);
  const res = await fetch(`${srv.baseURL}/api/connections`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${OWNER_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ label: 'sdk agent', kind: 'api' }),
  });
  expect(res.status).toBe(201);
  token = (await res.json()).token;
});

test.afterAll(async () => {
  await srv?.kill();
  await recv?.close();
});

/** POST /aap/v1/requests as the instance. */
async function createRequest(tool: string, args: object, extra: object = {}): Promise<any> {
  const res = await fetch(`${srv.baseURL}/aap/v1/requests`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', 'Idempotency-Key': crypto.randomUUID() },
    body: JSON.stringify({ tool, arguments: args, timeout: '30m', ...extra }),
  });
  expect(res.status).toBe(201);
  return res.json();
}

/** GET ?wait=30s, resolving with the request and the moment its answer arrived. */
function longPoll(id: string): Promise<{ body: any; at: number }> {
  return fetch(`${srv.baseURL}/aap/v1/requests/${id}?wait=30s`, { headers: { Authorization: `Bearer ${token}` } })
    .then(async (res) => {
      const body = await res.json();
      return { body, at: Date.now() };
    });
}

test('acceptance 2: an API request is in the inbox; Approve from a decision link on a phone wakes the long poll with approved and expires_at', async ({ page, browser }) => {
  const created = await createRequest('issue_refund', { payment_id: 'payment_e2e_approve', amount: 4900, currency: 'GBP' },
    { agent_reasoning: 'The customer was charged twice.', context: { session_id: 'checkout-bot', trace: 'span-'.repeat(80) } });
  expect(created.status).toBe('pending');

  // The owner's inbox shows it: the tool and its arguments.
  await loginAt(page, srv.baseURL);
  await page.goto(`${srv.baseURL}/inbox`);
  const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: 'payment_e2e_approve' });
  await expect(card).toBeVisible();
  await expect(card.locator('.inbox-tool')).toHaveText('issue_refund');
  await expect(card).toContainText('4900');

  const link = await recv.decisionLink('payment_e2e_approve');
  const poll = longPoll(created.id);

  const phoneCtx = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const phone = await phoneCtx.newPage();
  await phone.goto(link);
  const prompt = phone.getByRole('group', { name: 'Approval required: issue_refund', exact: true });
  await expect(prompt).toBeVisible();
  await expect(prompt).toContainText('payment_e2e_approve');
  // What the request says beside the call: the agent's claim, shown as such, and its context.
  await expect(prompt).toContainText('The agent says: The customer was charged twice.');
  await expect(prompt).toContainText('checkout-bot');
  await expect(prompt).toContainText('requested by the outside agent (the approval API)');
  await expect(phone.getByRole('button', { name: 'Edit', exact: true })).toHaveCount(0);
  expect(await phone.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  const decided = phone.waitForResponse((r) => r.request().method() === 'POST' && r.url().includes('/d/'));
  await phone.getByRole('button', { name: 'Approve', exact: true }).click();
  const decidedAt = (await decided, Date.now());
  const answered = await poll;
  // The poll's answer arrives at most 100 ms after the phone got the decision's own answer.
  expect(answered.at - decidedAt).toBeLessThanOrEqual(100);
  expect(answered.body.status).toBe('approved');
  expect(answered.body.decision.status).toBe('approved');
  expect(Date.parse(answered.body.decision.expires_at)).toBeGreaterThan(Date.parse(answered.body.decision.decided_at));
  await expect(phone.getByRole('status')).toContainText('approved by alice');
  await phoneCtx.close();
});

test('acceptance 2: a denial from the owner carries the note to the long poll', async ({ page }) => {
  const created = await createRequest('delete_customer', { customer: 'cus_e2e_deny' });
  const poll = longPoll(created.id);
  await loginAt(page, srv.baseURL);
  await page.goto(`${srv.baseURL}/inbox`);
  const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: 'cus_e2e_deny' });
  await expect(card).toBeVisible();
  const group = card.getByRole('group', { name: 'Approval required: delete_customer', exact: true });
  await group.getByRole('textbox', { name: 'Reason', exact: true }).fill('Not this customer');
  await group.getByRole('button', { name: 'Deny', exact: true }).click();
  const answered = await poll;
  expect(answered.body.status).toBe('denied');
  expect(answered.body.decision.note).toContain('Not this customer');
  expect(answered.body.decision.expires_at).toBeUndefined();
});
