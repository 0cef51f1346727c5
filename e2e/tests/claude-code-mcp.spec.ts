import * as fs from 'node:fs';
import * as path from 'node:path';
import { expect } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, loginAt, ownPortBase, startOwnServer, toolCard } from './helpers';
import { claudeProject, claudeToolResults, describe as describeRun, finalText, requireAgents, runClaude, test } from './real-agents';

// Issue 31, acceptance 3: the real Claude Code 2.1.328, headless and offline against
// bin/fakemodel, with Countersign's /mcp in its project's .mcp.json (the Agents page's MCP
// snippet). Claude Code names the gateway's tools mcp__countersign__<server>__<tool>: the fake
// model asks for mcp__countersign__stdio__echo (bin/mcp-stdioserver's echo, behind Countersign as
// server "stdio", not trusted); the person approves in the page; the upstream tool runs once and
// its result reaches the model.

test.beforeEach(() => requireAgents('claude'));

test('Claude Code calls mcp__countersign__stdio__echo through /mcp; approved in the page, the upstream runs once', async ({ page, request, fakeModel }, info) => {
  const stdioserver = path.resolve(__dirname, '../../bin/mcp-stdioserver');
  expect(fs.existsSync(stdioserver), `${stdioserver} is missing: run make e2e`).toBe(true);
  const name = `cc-mcp-${info.workerIndex}-${Date.now()}`;
  const root = path.resolve(__dirname, '../.tmp', name);
  fs.mkdirSync(root, { recursive: true });
  const config = path.join(root, 'mcp.json');
  fs.writeFileSync(config, JSON.stringify({ mcpServers: { stdio: { command: stdioserver } } }));
  const srv = await startOwnServer(name, ownPortBase + 150 + (info.workerIndex % 10), ['-mcp-config', config]);
  try {
    const res = await request.post(`${srv.baseURL}/api/connections`, {
      headers: { Authorization: `Bearer ${OWNER_TOKEN}` }, data: { label: 'e2e claude mcp', kind: 'mcp' },
    });
    expect(res.status(), await res.text()).toBe(201);
    const conn = await res.json();
    expect(conn.snippet.text).not.toContain(conn.token);
    // Claude Code's own prompt is not the gate here: its settings allow the server's tools, and
    // load the project's .mcp.json without asking (-p cannot ask).
    const project = claudeProject('cc-mcp', { enableAllProjectMcpServers: true, permissions: { allow: ['mcp__countersign'] } },
      fakeModel, conn.token);
    fs.writeFileSync(path.join(project.dir, '.mcp.json'), conn.snippet.text);
    // A project settings' permissions.allow counts only in a trusted folder (Claude Code says so
    // on stderr otherwise); and with tool search on, MCP tools are not offered to the model
    // until it searches: off, they are in every request, as the fake model needs.
    const claudeJSON = path.join(project.home, '.claude.json');
    const state = fs.existsSync(claudeJSON) ? JSON.parse(fs.readFileSync(claudeJSON, 'utf8')) : {};
    state.projects = { ...(state.projects ?? {}), [project.dir]: { hasTrustDialogAccepted: true } };
    fs.writeFileSync(claudeJSON, JSON.stringify(state));
    project.env.ENABLE_TOOL_SEARCH = 'false';

    const running = runClaude(project, 'Please echo this.\nfake-tool: mcp__countersign__stdio__echo {"text":"from claude code"}');

    await loginAt(page, srv.baseURL);
    await page.goto(`${srv.baseURL}/inbox`);
    const card = page.locator('#inbox-list > .inbox-card').filter({ hasText: 'stdio__echo' });
    await expect(card).toHaveCount(1, { timeout: 45_000 });
    const href = await card.getByRole('link').first().getAttribute('href');
    await page.goto(srv.baseURL + href!);
    const title = await page.locator('#session-title').textContent();
    const tc = toolCard(page, 'stdio__echo');
    await expect(tc).toContainText('from claude code');
    await approvalGroup(tc, 'stdio__echo').getByRole('button', { name: 'Approve', exact: true }).click();

    const r = await running.done;
    expect(r.code, describeRun(r)).toBe(0);
    const results = claudeToolResults(r);
    expect(results, describeRun(r)).toHaveLength(1);
    expect(results[0].is_error, describeRun(r)).toBe(false);
    // Claude Code gives the model the structuredContent when there is one.
    expect(results[0].content, describeRun(r)).toContain('{"echo":"from claude code"}');
    expect(finalText(r)).toContain('fake model saw: ');
    // Once: one call in the session, run once, its outcome in the card.
    await expect(tc).toContainText('echo: from claude code');
    await page.reload();
    await expect(toolCard(page, 'stdio__echo')).toHaveCount(1);
    info.annotations.push({ type: 'agent session', description: String(title) });
  } finally {
    await srv.kill();
  }
});
