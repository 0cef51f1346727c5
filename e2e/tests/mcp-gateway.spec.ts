import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, test } from '@playwright/test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { OWNER_TOKEN, approvalGroup, loginAt, ownPortBase, startOwnServer, toolCard, transcript } from './helpers';

/** A server of its own at port whose -mcp-config offers bin/mcp-stdioserver as server "stdio". */
async function startGatewayServer(name: string, port: number) {
  const stdioserver = path.resolve(__dirname, '../../bin/mcp-stdioserver');
  expect(fs.existsSync(stdioserver), `${stdioserver} is missing: run make e2e (or make mcp-testserver)`).toBe(true);
  const root = path.resolve(__dirname, '../.tmp', name);
  fs.mkdirSync(root, { recursive: true });
  const config = path.join(root, 'mcp.json');
  fs.writeFileSync(config, JSON.stringify({ mcpServers: { stdio: { command: stdioserver } } }));
  return startOwnServer(name, port, ['-mcp-config', config]);
}

// Issue 31, acceptance 2: a real MCP client nobody here wrote — the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.32.2) with its Streamable HTTP client — connects to Countersign's
// /mcp with a connection's token and calls a tool of an upstream stdio server (bin/mcp-stdioserver,
// not trusted, so every call asks). The prompt appears in the browser with the client's name; the
// person approves; the upstream's result reaches the client.

test('the TypeScript SDK calls a gated tool through /mcp; the prompt shows with the client\'s name; Approve returns the upstream\'s result', async ({ page, request }, info) => {
  const srv = await startGatewayServer(`mcp-gateway-${info.workerIndex}-${Date.now()}`, ownPortBase + 130 + (info.workerIndex % 10));
  let client: Client | undefined;
  try {
    const res = await request.post(`${srv.baseURL}/api/connections`, {
      headers: { Authorization: `Bearer ${OWNER_TOKEN}` }, data: { label: 'e2e ts sdk', kind: 'mcp' },
    });
    expect(res.status(), await res.text()).toBe(201);
    const { token } = await res.json();

    client = new Client({ name: 'e2e-ts-sdk-client', version: '3.1.4' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${srv.baseURL}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }));
    const { tools } = await client.listTools();
    const echo = tools.find((t) => t.name === 'stdio__echo');
    expect(echo, JSON.stringify(tools.map((t) => t.name))).toBeTruthy();
    expect(echo!.annotations?.readOnlyHint).toBe(true); // shown as the server gave it, not believed

    const call = client.callTool({ name: 'stdio__echo', arguments: { text: 'through the gateway' } });

    await loginAt(page, srv.baseURL);
    await page.goto(`${srv.baseURL}/inbox`);
    const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: 'stdio__echo' });
    await expect(card).toHaveCount(1, { timeout: 30_000 });
    await expect(card).toContainText('e2e-ts-sdk-client 3.1.4');
    const href = await card.getByRole('link').first().getAttribute('href');
    await page.goto(srv.baseURL + href!);
    await expect(page.locator('#session-title')).toHaveText('e2e-ts-sdk-client 3.1.4 · MCP');
    const tc = toolCard(page, 'stdio__echo');
    await expect(tc).toContainText('through the gateway');
    const group = approvalGroup(tc, 'stdio__echo');
    await expect(group).toContainText('asks because server stdio is not trusted');
    await expect(group).toContainText('requested by the MCP client (through /mcp)');
    await group.getByRole('button', { name: 'Approve', exact: true }).click();

    const result = await call;
    expect(result.isError ?? false).toBe(false);
    expect(result.structuredContent).toEqual({ echo: 'through the gateway' });
    expect(result.content).toEqual([{ type: 'text', text: 'echo: through the gateway' }]);
    // The outcome shows in the call's card.
    await expect(tc).toContainText('echo: through the gateway');
  } finally {
    await client?.close();
    await srv.kill();
  }
});

// Issue 35: a call a rule allows is answered without waiting for its record; the record is
// stored right after and only then shown. The page open on the agent session shows the next
// call and its result live (no reload), in order, and after a reload they are still there.
test('a call a rule allows through /mcp is answered at once and shown in the page once stored', async ({ page, request }, info) => {
  const srv = await startGatewayServer(`mcp-gateway-rule-${info.workerIndex}-${Date.now()}`, ownPortBase + 140 + (info.workerIndex % 10));
  let client: Client | undefined;
  try {
    const owner = { Authorization: `Bearer ${OWNER_TOKEN}` };
    const conn = await request.post(`${srv.baseURL}/api/connections`, { headers: owner, data: { label: 'e2e rule client', kind: 'mcp' } });
    expect(conn.status(), await conn.text()).toBe(201);
    const { token } = await conn.json();
    const rule = await request.post(`${srv.baseURL}/api/rules`, { headers: owner, data: { text: 'stdio__echo', effect: 'allow', scope: 'server' } });
    expect(rule.status(), await rule.text()).toBe(201);

    client = new Client({ name: 'e2e-rule-client', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${srv.baseURL}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }));
    const first = await client.callTool({ name: 'stdio__echo', arguments: { text: 'first by rule' } });
    expect(first.isError ?? false).toBe(false);
    expect(first.structuredContent).toEqual({ echo: 'first by rule' });

    await loginAt(page, srv.baseURL);
    await page.goto(`${srv.baseURL}/`);
    await page.getByRole('link', { name: /e2e-rule-client 1\.0\.0 · MCP/ }).first().click();
    await expect(page.locator('#session-title')).toHaveText('e2e-rule-client 1.0.0 · MCP');
    const cards = transcript(page).getByRole('article', { name: 'Tool call stdio__echo', exact: true });
    await expect(cards).toHaveCount(1);
    await expect(cards.first()).toContainText('echo: first by rule');
    await expect(cards.first()).toContainText('stdio__echo');

    // Live: the next call appears with its result, after the first, without a reload.
    const second = await client.callTool({ name: 'stdio__echo', arguments: { text: 'second by rule' } });
    expect(second.structuredContent).toEqual({ echo: 'second by rule' });
    await expect(cards).toHaveCount(2);
    await expect(cards.nth(1)).toContainText('echo: second by rule');
    await expect(page.getByRole('group', { name: /Approval required/ })).toHaveCount(0);

    await page.reload();
    await expect(cards).toHaveCount(2);
    await expect(cards.nth(0)).toContainText('echo: first by rule');
    await expect(cards.nth(1)).toContainText('echo: second by rule');
    // The audit names the rule for both.
    await page.getByRole('link', { name: 'Audit' }).click();
    await expect(page.locator('table tr').filter({ hasText: 'stdio__echo' })).toHaveCount(2);
    await expect(page.locator('table tr').filter({ hasText: 'stdio__echo' }).first()).toContainText('stdio__echo');
  } finally {
    await client?.close();
    await srv.kill();
  }
});
