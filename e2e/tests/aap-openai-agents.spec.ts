import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test, expect, type APIRequestContext } from '@playwright/test';
import { OWNER_TOKEN } from './helpers';

// Issue 32, acceptance 3 (SPEC §18 Door 3), a second SDK: the OpenAI Agents SDK from npm
// (examples/openai-agents, `@openai/agents` pinned), with a scripted stand-in model (--mock),
// calls a tool with needsApproval; its interruption is answered through Countersign's approval
// API (the README's recipe): approved → the tool runs; rejected → it never runs.

const example = path.resolve(__dirname, '../../examples/openai-agents');
const owner = { Authorization: `Bearer ${OWNER_TOKEN}` };

async function apiToken(request: APIRequestContext): Promise<string> {
  const res = await request.post('/api/connections', { headers: owner, data: { label: 'openai agents sdk', kind: 'api' } });
  expect(res.status()).toBe(201);
  return (await res.json()).token;
}

/** Runs the example agent for payment; resolves with its exit code and output. */
function runAgent(baseURL: string, token: string, payment: string): Promise<{ code: number | null; out: string }> {
  const p = spawn('node', ['agent.mjs', '--mock', payment], { cwd: example, env: { ...process.env, COUNTERSIGN_URL: baseURL, COUNTERSIGN_AGENT_TOKEN: token } });
  let out = '';
  p.stdout.on('data', (d) => { out += String(d); });
  p.stderr.on('data', (d) => { out += String(d); });
  return new Promise((resolve) => p.on('exit', (code) => resolve({ code, out })));
}

/** The pending approval whose arguments hold marker, through the owner's API. */
async function pendingApproval(request: APIRequestContext, marker: string): Promise<string> {
  let id = '';
  await expect(async () => {
    const { sessions } = await (await request.get('/api/sessions', { headers: owner })).json();
    for (const s of sessions) {
      const { approvals } = await (await request.get(`/api/sessions/${s.id}/approvals?status=pending`, { headers: owner })).json();
      const a = approvals.find((x: any) => JSON.stringify(x.arguments).includes(marker));
      if (a) { id = a.id; return; }
    }
    throw new Error(`no pending approval for ${marker}`);
  }).toPass({ timeout: 15_000 });
  return id;
}

for (const c of [
  { decision: 'approve', word: 'approved', payment: 'payment_oa_ok', reason: '' },
  { decision: 'deny', word: 'denied', payment: 'payment_oa_no', reason: 'Refunds wait for finance' },
]) {
  test(`acceptance 3: the OpenAI Agents SDK's interruption, ${c.word} through Countersign`, async ({ request, baseURL }) => {
    const token = await apiToken(request);
    const running = runAgent(baseURL!, token, c.payment);
    const id = await pendingApproval(request, c.payment);
    const res = await request.post(`/api/approvals/${id}/decision`, { headers: owner, data: { decision: c.decision, reason: c.reason } });
    expect(res.status()).toBe(200);
    const r = await running;
    expect(r.code, r.out).toBe(0);
    const got = JSON.parse(r.out.trim().split('\n').filter((l) => l.startsWith('{')).pop()!);
    if (c.decision === 'approve') {
      expect(got.ran).toEqual([c.payment]);
      expect(got.text).toContain(`refunded 4900 on ${c.payment}`);
    } else {
      expect(got.ran).toEqual([]);
      expect(got.text).toContain('model saw');
      expect(got.text).not.toContain('refunded');
    }
  });
}
