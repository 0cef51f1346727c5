import * as path from 'node:path';
import { expect, type Locator, type Page } from '@playwright/test';

// Shared helpers for the browser tests. Locators are role based and follow the accessibility
// contract of SPEC §6; keep them in step with it.

/** Owner token that serve.sh passes to the server with -token. */
export const OWNER_TOKEN = 'e2e-owner-token-0123456789abcdefghij';

/** The server's -workspace folder (serve.sh creates it fresh as e2e/.tmp/workspace). */
export const workspace = path.resolve(__dirname, '../.tmp/workspace');

/** Logs in as the owner and waits for the session list. */
export async function login(page: Page): Promise<void> {
  await page.goto(`/login?token=${OWNER_TOKEN}`);
  await expect(page.getByRole('button', { name: 'Create session', exact: true })).toBeVisible();
  await expect(page.getByRole('textbox', { name: 'Title', exact: true })).toBeVisible();
}

/**
 * Creates a session from the session list's form (the workspace field keeps its pre-filled value,
 * the server's -workspace) and waits for the session page. Returns the session id from the URL.
 */
export async function newSession(page: Page, title: string, model: string): Promise<string> {
  const here = new URL(page.url(), 'http://x');
  if (!/^\/?$/.test(here.pathname)) {
    // Stay on the same server: tests may drive a server of their own on another port.
    await page.goto(page.url().startsWith('http') ? new URL('/', page.url()).href : '/');
  }
  await page.getByRole('textbox', { name: 'Title', exact: true }).fill(title);
  await page.getByRole('combobox', { name: 'Model', exact: true }).selectOption(model);
  await page.getByRole('button', { name: 'Create session', exact: true }).click();
  await expect(page).toHaveURL(/\/sessions\/[^/?#]+$/);
  await expect(page.getByRole('textbox', { name: 'Message', exact: true })).toBeVisible();
  // An empty transcript may have no height yet, so only require it in the page.
  await expect(transcript(page)).toBeAttached();
  return new URL(page.url()).pathname.split('/').pop()!;
}

/** Sends a chat message and waits until it shows in the transcript. */
export async function send(page: Page, text: string): Promise<void> {
  const box = page.getByRole('textbox', { name: 'Message', exact: true });
  await box.fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await expect(transcript(page)).toContainText(text);
}

/** The transcript (role="log", name "Transcript"). */
export function transcript(page: Page): Locator {
  return page.getByRole('log', { name: 'Transcript', exact: true });
}

/** The card of a tool call inside the transcript (role="article", name "Tool call <name>"). */
export function toolCard(page: Page, toolName: string): Locator {
  return transcript(page).getByRole('article', { name: `Tool call ${toolName}`, exact: true });
}

/** A pending approval inside a tool card (role="group", name "Approval required: <name>"). */
export function approvalGroup(card: Locator, toolName: string): Locator {
  return card.getByRole('group', { name: `Approval required: ${toolName}`, exact: true });
}

/** Any pending approval group inside a card, whatever tool it names. */
export function anyApprovalGroup(card: Locator): Locator {
  return card.getByRole('group', { name: /^Approval required: / });
}

/** The "Stop" button, shown while a run is busy. */
export function stopButton(page: Page): Locator {
  return page.getByRole('button', { name: 'Stop', exact: true });
}

/** Collapses runs of whitespace so texts rendered live and rendered from the store compare equal. */
export function normalise(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/**
 * The transcript's visible text without the tool call cards: the user's and the assistant's
 * messages. Used to check the assistant's final answer, which must not be confused with the same
 * words inside a tool result.
 */
export async function textOutsideToolCards(page: Page): Promise<string> {
  return transcript(page).evaluate((log) => {
    const clone = log.cloneNode(true) as HTMLElement;
    clone.querySelectorAll('[data-tool-call-id]').forEach((el) => el.remove());
    return (clone.textContent ?? '').replace(/\s+/g, ' ').trim();
  });
}

/** Waits until the assistant's text (outside tool cards) contains `text` and the run has ended. */
export async function expectFinalText(page: Page, text: string): Promise<void> {
  await expect.poll(() => textOutsideToolCards(page), { message: `final text containing ${JSON.stringify(text)}` })
    .toContain(text);
  await expect(stopButton(page)).toBeHidden();
}

/** The first port tests may start servers of their own on (E2E_PORT + 220, plus the worker index). */
export const ownPortBase = Number(process.env.E2E_PORT || 18080) + 220;

/** A server process a test starts itself (for restarts and other flags), on its own data. */
export interface OwnServer {
  baseURL: string;
  workspace: string;
  dbPath: string;
  /** Sends a signal (default SIGKILL) and waits for the process to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Starts bin/countersign on `port` with a database and workspace under e2e/.tmp/<name> (kept
 * between starts, so a restart sees the same store) and the e2e scripts. Resolves once the
 * login line is printed; `baseURL` is the address that line names, so port 0 (a free port the
 * system picks) works. `env` replaces the environment the server gets (default: this process's).
 * The caller kills it.
 */
export async function startOwnServer(name: string, port: number, extraArgs: string[] = [], env?: NodeJS.ProcessEnv): Promise<OwnServer> {
  const { spawn } = await import('node:child_process');
  const fs = await import('node:fs');
  const root = path.resolve(__dirname, '../.tmp', name);
  const ws = path.join(root, 'workspace');
  fs.mkdirSync(ws, { recursive: true });
  const dbPath = path.join(root, 'db', 'own.db');
  const bin = path.resolve(__dirname, '../../bin/countersign');
  const proc = spawn(bin, ['-addr', `127.0.0.1:${port}`, '-db', dbPath, '-token', OWNER_TOKEN, '-workspace', ws,
    '-scripts', path.resolve(__dirname, '../scripts'), '-fixture-tools', '-faux-delay', '5ms', ...extraArgs],
    { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  const baseURL = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server ${name} did not start: ${out}`)), 60_000);
    proc.stdout!.on('data', (d) => {
      out += String(d);
      const listening = /Countersign listening on (http:\/\/[^/\s]+)\//.exec(out);
      if (listening) {
        clearTimeout(timer);
        resolve(listening[1]);
      }
    });
    proc.stderr!.on('data', (d) => { out += String(d); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server ${name} exited (${code}): ${out}`)); });
  });
  return {
    baseURL,
    workspace: ws,
    dbPath,
    async kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (proc.exitCode === null) proc.kill(signal);
      await exited;
    },
  };
}

/** Logs in on another server's origin. */
export async function loginAt(page: Page, baseURL: string): Promise<void> {
  await page.goto(`${baseURL}/login?token=${OWNER_TOKEN}`);
  await expect(page.getByRole('button', { name: 'Create session', exact: true })).toBeVisible();
}
