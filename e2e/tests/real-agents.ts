import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { test as base, expect, type APIRequestContext, type Locator } from '@playwright/test';
import { OWNER_TOKEN } from './helpers';

// The harness of the real-agent specs (claude-code.spec.ts, codex.spec.ts; SPEC §18, issue 30
// acceptance 2–4): the real Claude Code and Codex from e2e/agents (pinned; `make e2e` and .ci/run
// install them), run headless and offline (../shared/agents/README.md) against bin/fakemodel, the
// fake Anthropic and Responses APIs, which every run steers through its own prompt
// (`fake-bash: <command>`), so one fake model per worker serves every test.

const root = path.resolve(__dirname, '../..');
/** The agents' executables (e2e/agents/node_modules/.bin). */
export const agentBin = path.resolve(__dirname, '../agents/node_modules/.bin');
/** The repository's bin/ (countersign, countersign-hook, fakemodel), first on the agents' PATH. */
export const repoBin = path.join(root, 'bin');
/** Where each test's project, HOME and temp folders live (e2e/.tmp is fresh per run). */
const tmpRoot = path.resolve(__dirname, '../.tmp/agents');

export const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };

/**
 * Skips (locally) or fails (in CI) when the agents or the fake model are not installed: `make
 * e2e` builds and installs them; CI must never skip these.
 */
export function requireAgents(agent: 'claude' | 'codex'): void {
  const missing = [path.join(agentBin, agent), path.join(repoBin, 'fakemodel'), path.join(repoBin, 'countersign-hook')]
    .filter((f) => !fs.existsSync(f));
  if (missing.length === 0) return;
  const why = `not installed: ${missing.join(', ')} (run \`make e2e\`, or \`make build fakemodel\` and \`cd e2e/agents && npm ci\`)`;
  if (process.env.CI) throw new Error(why);
  base.skip(true, why);
}

/** A running bin/fakemodel. */
export interface FakeModel {
  /** http://127.0.0.1:<port> — ANTHROPIC_BASE_URL; Codex's provider base_url is this + "/v1". */
  url: string;
  stop(): Promise<void>;
}

/** Starts bin/fakemodel on a free port; resolves once it prints its address. */
export async function startFakeModel(): Promise<FakeModel> {
  const proc = spawn(path.join(repoBin, 'fakemodel'), ['-v'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  proc.stderr!.on('data', (d) => log.push(String(d)));
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d) => {
      out += String(d);
      const m = /fakemodel listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    proc.on('exit', (code) => reject(new Error(`fakemodel exited (${code}): ${out}${log.join('')}`)));
  });
  return {
    url,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}

/** The agent processes started and not yet ended. */
const live = new Set<ChildProcess>();

/**
 * The tests of the agent specs: `fakeModel` is one bin/fakemodel per worker, shared by its tests;
 * after each test, an agent still running (a test that failed while its call was held) is killed.
 */
export const test = base.extend<{ agentCleanup: void }, { fakeModel: FakeModel }>({
  fakeModel: [async ({}, use) => {
    const fm = await startFakeModel();
    await use(fm);
    await fm.stop();
  }, { scope: 'worker' }],
  agentCleanup: [async ({}, use) => {
    await use();
    for (const proc of live) proc.kill('SIGKILL');
  }, { auto: true }],
});

/** A connection as POST /api/connections answers it; `snippet` is the text to paste. */
export interface Connection {
  connection: { id: string; label: string; kind: string; [k: string]: unknown };
  token: string;
  snippet: string;
  /** The whole snippet object (kind, where, format, text, export, unreachable, verified, notes). */
  snippetInfo: any;
}

/** Creates a connection through the API (201), on `baseURL` (default: the suite's server). */
export async function createConnection(request: APIRequestContext, label: string, kind: 'claude-code' | 'codex', baseURL = ''): Promise<Connection> {
  const res = await request.post(`${baseURL}/api/connections`, { headers: auth, data: { label, kind } });
  expect(res.status(), await res.text()).toBe(201);
  const body = await res.json();
  expect(body.token, 'the token is returned once').toBeTruthy();
  const text = typeof body.snippet === 'string' ? body.snippet : body.snippet?.text;
  expect(text, 'the snippet to paste').toBeTruthy();
  expect(text, 'the snippet names the token variable, never the token').not.toContain(body.token);
  return { ...body, snippet: text, snippetInfo: body.snippet } as Connection;
}

/**
 * Clicks a decision button (Approve, Deny) and waits for the decision's POST to be answered, so
 * that a reload after it never cancels the request in flight.
 */
export async function decide(button: Locator): Promise<void> {
  const [res] = await Promise.all([
    button.page().waitForResponse((r) => r.request().method() === 'POST' && /\/decision$/.test(new URL(r.url()).pathname)),
    button.click(),
  ]);
  expect(res.status(), await res.text()).toBeLessThan(400);
}

/** Adds a rule through the Rules API (201) and returns it. */
export async function addRule(request: APIRequestContext, data: Record<string, unknown>, baseURL = ''): Promise<any> {
  const res = await request.post(`${baseURL}/api/rules`, { headers: auth, data });
  expect(res.status(), await res.text()).toBe(201);
  return res.json();
}

/** A fresh project folder for one agent run, with its own HOME and temp folders. */
export interface Project {
  /** The project (the agent's working directory), a git repository with one commit. */
  dir: string;
  /** The project folder's name, unique in the run (the agent session's title ends with it). */
  name: string;
  home: string;
  /** The environment the agent runs with: nothing of this process's but what is listed. */
  env: NodeJS.ProcessEnv;
  /** True once `name` exists in the project folder. */
  has(name: string): boolean;
}

let projects = 0;

/** Makes folders for a run under e2e/.tmp/agents/<name>-<n>: project (git init), home, run, tmp. */
function makeProject(name: string): { dir: string; home: string; run: string; tmp: string } {
  // The project's folder name is unique: Countersign titles an agent session "<agent> · <folder>".
  const unique = `${name.replace(/[^a-z0-9-]+/gi, '-')}-${process.pid}-${++projects}`;
  const at = path.join(tmpRoot, unique);
  fs.rmSync(at, { recursive: true, force: true });
  const dirs = { dir: path.join(at, unique), home: path.join(at, 'home'), run: path.join(at, 'run'), tmp: path.join(at, 'tmp') };
  for (const d of Object.values(dirs)) fs.mkdirSync(d, { recursive: true });
  fs.chmodSync(dirs.run, 0o700);
  fs.writeFileSync(path.join(dirs.dir, 'README.md'), '# a project an agent works in\n');
  const git = (...args: string[]) => {
    const r = spawnSync('git', args, {
      cwd: dirs.dir, encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: dirs.home, GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@localhost', GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@localhost' },
    });
    if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
  };
  git('init', '-q', '-b', 'main');
  git('add', 'README.md');
  git('commit', '-q', '-m', 'start');
  return dirs;
}

function project(dirs: { dir: string; home: string }, env: NodeJS.ProcessEnv): Project {
  return { dir: dirs.dir, name: path.basename(dirs.dir), home: dirs.home, env, has: (name) => fs.existsSync(path.join(dirs.dir, name)) };
}

/**
 * The PATH the agents get: the repository's bin/ first (countersign-hook), this Node's folder
 * (Codex's launcher, bin/codex.js, is a Node script), then the system's.
 */
const agentPath = [repoBin, path.dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(':');

/**
 * The Claude Code settings for a connection's snippet: the snippet is the whole
 * `.claude/settings.json` (an object with `hooks`), or the `hooks` block alone.
 */
export function claudeSettings(snippet: string): any {
  const parsed = JSON.parse(snippet);
  return parsed.hooks ? parsed : { hooks: parsed };
}

/**
 * Lowers every hook's timeout in Claude Code settings to `seconds`: the `timeout` field, and
 * what tells Countersign the deadline — the Countersign-Hook-Timeout header if the snippet has
 * one, else `?timeout=<seconds>` in the hook's URL (Claude Code keeps a URL's query).
 */
export function withHookTimeout(settings: any, seconds: number): any {
  const copy = JSON.parse(JSON.stringify(settings));
  for (const groups of Object.values<any[]>(copy.hooks)) {
    for (const group of groups) {
      for (const h of group.hooks ?? []) {
        h.timeout = seconds;
        const header = Object.keys(h.headers ?? {}).find((k) => k.toLowerCase() === 'countersign-hook-timeout');
        if (header) {
          h.headers[header] = String(seconds);
        } else if (typeof h.url === 'string') {
          const u = new URL(h.url);
          u.searchParams.set('timeout', String(seconds));
          h.url = u.href;
        }
      }
    }
  }
  return copy;
}

/** A project for Claude Code: `settings` as its .claude/settings.json; the offline environment of the README. */
export function claudeProject(name: string, settings: any, fake: FakeModel, token: string): Project {
  const d = makeProject(name);
  fs.mkdirSync(path.join(d.dir, '.claude'), { recursive: true });
  fs.writeFileSync(path.join(d.dir, '.claude', 'settings.json'), JSON.stringify(settings, null, 2));
  return project(d, {
    PATH: agentPath,
    LANG: 'C.UTF-8',
    HOME: d.home,
    XDG_RUNTIME_DIR: d.run,
    CLAUDE_CODE_TMPDIR: d.tmp,
    TMPDIR: d.tmp,
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: 'sk-test',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    COUNTERSIGN_AGENT_TOKEN: token,
  });
}

/**
 * A project for Codex: ~/.codex/config.toml with the fake provider (the README's "quiet"
 * configuration: no update check, analytics or plugins), then `hooksToml` (the connection's
 * snippet).
 */
export function codexProject(name: string, hooksToml: string, fake: FakeModel, token: string): Project {
  const d = makeProject(name);
  fs.mkdirSync(path.join(d.home, '.codex'), { recursive: true });
  const config = `model = "gpt-5.5"
model_provider = "fake"
approval_policy = "on-request"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false

[model_providers.fake]
name = "fake"
base_url = "${fake.url}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"

${hooksToml}
`;
  fs.writeFileSync(path.join(d.home, '.codex', 'config.toml'), config);
  return project(d, {
    PATH: agentPath,
    LANG: 'C.UTF-8',
    HOME: d.home,
    TMPDIR: d.tmp,
    OPENAI_API_KEY: 'sk-test',
    COUNTERSIGN_AGENT_TOKEN: token,
  });
}

/** One finished agent run. */
export interface AgentRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout's JSON lines (stream-json for Claude Code, --json for Codex). */
  events: any[];
  /** The same lines with when each arrived (Date.now()), for timing a hook's answer. */
  timed: { at: number; e: any }[];
  ms: number;
}

/** A started agent run: `done` resolves when it exits. */
export interface Running {
  done: Promise<AgentRun>;
  proc: ChildProcess;
  /** Resolves with the first stdout JSON line `match` accepts (event-driven); rejects if the run ends first. */
  event(match: (e: any) => boolean): Promise<any>;
}

function parseLines(stdout: string): any[] {
  return stdout.split('\n').filter((l) => l.trim().startsWith('{')).map((l) => {
    try { return JSON.parse(l); } catch { return { unparsed: l }; }
  });
}

function run(cmd: string, args: string[], p: Project): Running {
  const started = Date.now();
  const proc = spawn(cmd, args, { cwd: p.dir, env: p.env, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  proc.on('exit', () => live.delete(proc));
  let stdout = '';
  let stderr = '';
  const listeners: (() => void)[] = [];
  const timed: { at: number; e: any }[] = [];
  let parsedUpTo = 0;
  proc.stdout!.on('data', (d) => {
    stdout += String(d);
    const end = stdout.lastIndexOf('\n') + 1;
    if (end > parsedUpTo) {
      for (const e of parseLines(stdout.slice(parsedUpTo, end))) timed.push({ at: Date.now(), e });
      parsedUpTo = end;
    }
    for (const l of listeners.slice()) l();
  });
  proc.stderr!.on('data', (d) => { stderr += String(d); });
  const done = new Promise<AgentRun>((resolve, reject) => {
    proc.on('error', reject);
    proc.on('close', (code) => {
      resolve({ code, stdout, stderr, events: parseLines(stdout), timed, ms: Date.now() - started });
    });
  });
  const event = (match: (e: any) => boolean) => new Promise<any>((resolve, reject) => {
    const check = () => {
      const found = parseLines(stdout).find(match);
      if (found) {
        listeners.splice(listeners.indexOf(check), 1);
        resolve(found);
      }
    };
    listeners.push(check);
    check();
    done.then((r) => reject(new Error(`the agent ended without that event: ${describe(r)}`)), reject);
  });
  return { done, proc, event };
}

/** A prompt that makes the fake model ask for the shell tool with `command`. */
export function bashPrompt(command: string, extra = ''): string {
  return `Please run this for me.\nfake-bash: ${command}\n${extra}`;
}

/**
 * Starts `claude -p <prompt> --output-format stream-json --verbose --include-hook-events
 * --permission-mode default < /dev/null` in the project.
 */
export function runClaude(p: Project, prompt: string): Running {
  return run(path.join(agentBin, 'claude'), ['-p', prompt, '--output-format', 'stream-json', '--verbose',
    '--include-hook-events', '--permission-mode', 'default'], p);
}

/** Starts `codex exec --json --approve-for-me --dangerously-bypass-hook-trust <prompt> < /dev/null`. */
export function runCodex(p: Project, prompt: string): Running {
  return run(path.join(agentBin, 'codex'), ['exec', '--json', '--approve-for-me', '--dangerously-bypass-hook-trust', prompt], p);
}

/** Claude Code's session id, from its stream-json `system`/`init` line (printed first). */
export async function claudeSessionId(r: Running): Promise<string> {
  return (await r.event((e) => e.type === 'system' && e.subtype === 'init')).session_id;
}

/** The tool results Claude Code reported in a run (stream-json `user` messages' `tool_result` blocks). */
export function claudeToolResults(r: AgentRun): { content: string; is_error: boolean }[] {
  const out: { content: string; is_error: boolean }[] = [];
  for (const e of r.events) {
    if (e.type !== 'user') continue;
    for (const b of e.message?.content ?? []) {
      if (b.type !== 'tool_result') continue;
      const content = typeof b.content === 'string' ? b.content : (b.content ?? []).map((c: any) => c.text ?? '').join('\n');
      out.push({ content, is_error: !!b.is_error });
    }
  }
  return out;
}

/** Codex's command executions in a run (--json `item.completed` of type command_execution). */
export function codexCommands(r: AgentRun): any[] {
  return r.events.filter((e) => e.type === 'item.completed' && e.item?.type === 'command_execution').map((e) => e.item);
}

/** The agent's last message text (Claude Code's `result`, Codex's last agent_message). */
export function finalText(r: AgentRun): string {
  const result = r.events.filter((e) => e.type === 'result').pop();
  if (result) return String(result.result ?? '');
  const msg = r.events.filter((e) => e.type === 'item.completed' && e.item?.type === 'agent_message').pop();
  return String(msg?.item?.text ?? '');
}

/** Describes a run for an assertion message. */
export function describe(r: AgentRun): string {
  return `exit ${r.code} after ${r.ms} ms\nstdout:\n${r.stdout.slice(-4000)}\nstderr:\n${r.stderr.slice(-2000)}`;
}

/** One request a webhook receiver got. */
export interface Hit {
  headers: http.IncomingHttpHeaders;
  json: any;
}

/** A webhook receiver (as webhooks.spec.ts's): records every request, answers 200. */
export class Receiver {
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
        self.hits.push({ headers: req.headers, json: JSON.parse(body) });
        res.end();
        for (const w of self.waiters.splice(0)) w();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    self = new Receiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return self;
  }

  /** Waits (event-driven) for a request that `match` accepts. */
  async waitFor(match: (h: Hit) => boolean): Promise<Hit> {
    for (;;) {
      const got = this.hits.find(match);
      if (got) return got;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
