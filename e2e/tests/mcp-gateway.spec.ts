import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect, test } from '@playwright/test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { OWNER_TOKEN, approvalGroup, loginAt, ownPortBase, startOwnServer, toolCard } from './helpers';

// Issue 31, acceptance 2: a real MCP client nobody here wrote — the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.32.2) with its Streamable HTTP client — connects to Countersign's
// /mcp with a connection's token and calls a tool of an upstream stdio server (bin/mcp-stdioserver,
// not trusted, so every call asks). The prompt appears in the browser with the client's name; the
// person approves; the upstream's result reaches the client.

test('the TypeScript SDK calls a gated tool through /mcp; the prompt shows with the client\'s name; Approve returns the upstream\'s result', async ({ page, request }, info) => {
  const stdioserver = path.resolve(__dirname, '../../bin/mcp-stdioserver');
  expect(fs.existsSync(stdioserver), `${stdioserver} is missing: run make e2e (or make mcp-testserver)`).toBe(true);
  const name = `mcp-gateway-${info.workerIndex}-${Date.now()}`;
  const root = path.resolve(__dirname, '../.tmp', name);
  fs.mkdirSync(root, { recursive: true });
  const config = path.join(root, 'mcp.json');
  fs.writeFileSync(config, JSON.stringify({ mcpServers: { stdio: { command: stdioserver } } }));
  const srv = await startOwnServer(name, ownPortBase + 130 + (info.workerIndex % 10), ['-mcp-config', config]);
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
