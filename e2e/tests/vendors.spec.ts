import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import {
  OWNER_TOKEN, anyApprovalGroup, approvalGroup, expectFinalText, loginAt, newSession, send, startOwnServer, stopButton,
  toolCard, transcript, type OwnServer,
} from './helpers';
import { FakeVendor, replaysToolCall, systemPrompt, toolNames, toolResult } from './fake-vendor';

// Issue 18 (SPEC §17 "Tested without the internet"), the browser half: the real provider code
// paths (openai-go's Chat Completions and Responses, anthropic-sdk-go's Messages) driven from the
// browser against a local fake vendor (fake-vendor.ts), for each API:
//   - acceptance 2: a streamed run_command call is approved, its output reaches the vendor as the
//     tool result of the next request, and the final answer shows its token usage;
//   - acceptance 3: the system prompt the vendor received names the session's workspace and holds
//     the instructions typed in the New-session form;
//   - a tool call's card shows its arguments while they stream and asks only once they are whole;
//   - a 429 is retried after the vendor's Retry-After, shown as "retrying (429) in 2 s", and Stop
//     ends the run during that wait;
//   - acceptance 4: with -context-tokens 2000 a run whose transcript outgrows it keeps going, the
//     oldest tool results are sent shortened, the transcript says so, and the page and the store
//     keep them whole (a second server, with that flag, on the same fake vendor).
//
// One Countersign server for the file, started with every vendor pointed at one fake vendor;
// the tests of the file run one after another in one worker (they share that server).

const OPENAI_MODEL = 'fake-gpt';
const OPENAI_RESPONSES_MODEL = 'fake-gpt-r';
const ANTHROPIC_MODEL = 'fake-claude';

let vendor: FakeVendor;
let srv: OwnServer;
/** The environment the servers of this file get: every vendor pointed at the fake. */
let vendorEnv: NodeJS.ProcessEnv;

test.describe.configure({ mode: 'default' });

test.beforeAll(async ({}, info) => {
  vendor = await FakeVendor.start();
  const name = `vendors-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  // Only the variables under test: nothing from the caller's environment reaches a real vendor.
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) {
    if (/^(OPENAI|ANTHROPIC)_/.test(k) || /^COUNTERSIGN_/.test(k)) delete env[k];
  }
  Object.assign(env, {
    OPENAI_BASE_URL: `${vendor.url}/v1`, OPENAI_API_KEY: 'test', OPENAI_MODEL, OPENAI_RESPONSES_MODEL,
    ANTHROPIC_BASE_URL: vendor.url, ANTHROPIC_API_KEY: 'test', ANTHROPIC_MODEL,
  });
  vendorEnv = env;
  srv = await startOwnServer(name, 0, [], env);
});

test.afterAll(async () => {
  await srv?.kill();
  await vendor?.close();
});

/** Each vendor API: its name, the model Countersign offers, the fake's model and a call id in its style. */
const cases = [
  { vendorName: 'OpenAI Chat Completions', model: `openai:${OPENAI_MODEL}`, vendorModel: OPENAI_MODEL, api: 'openai-chat', callId: 'call_fake0001' },
  { vendorName: 'OpenAI Responses', model: `openai-responses:${OPENAI_RESPONSES_MODEL}`, vendorModel: OPENAI_RESPONSES_MODEL, api: 'openai-responses', callId: 'call_fakeresp01' },
  { vendorName: 'Anthropic Messages', model: `anthropic:${ANTHROPIC_MODEL}`, vendorModel: ANTHROPIC_MODEL, api: 'anthropic-messages', callId: 'toolu_fake0001' },
] as const;

/** Fails fast, with a clear message, when the server does not offer `model`. */
async function expectOffered(page: Page, model: string): Promise<void> {
  await page.goto(`${srv.baseURL}/`);
  const box = page.getByRole('combobox', { name: 'Model', exact: true });
  await expect(box.getByRole('option', { name: model, exact: true }), `the Model list offers ${model}`).toHaveCount(1);
}

/**
 * Creates a session from the New-session form with `model`, the folder `workspace`, and `typed`
 * appended to the pre-filled Instructions; waits for the session page and returns its id.
 */
async function newVendorSession(page: Page, title: string, model: string, workspace: string, typed: string): Promise<string> {
  await expectOffered(page, model);
  await page.getByRole('textbox', { name: 'Title', exact: true }).fill(title);
  await page.getByRole('combobox', { name: 'Model', exact: true }).selectOption(model);
  await page.getByRole('textbox', { name: 'Workspace', exact: true }).fill(workspace);
  const instructions = page.getByRole('textbox', { name: 'Instructions', exact: true });
  // Pre-filled with the built-in default (it tells the model its workspace and that calls may be denied).
  await expect(instructions).not.toHaveValue('');
  await instructions.fill(`${await instructions.inputValue()}\n\n${typed}`);
  await page.getByRole('button', { name: 'Create session', exact: true }).click();
  await expect(page).toHaveURL(/\/sessions\/[^/?#]+$/);
  await expect(page.getByRole('textbox', { name: 'Message', exact: true })).toBeVisible();
  return new URL(page.url()).pathname.split('/').pop()!;
}

/** The usage both scripted replies of the approval test reported, per message and in total. */
async function expectUsage(page: Page): Promise<void> {
  const usage = transcript(page).getByTestId('message-usage');
  await expect(usage).toContainText(['1,200 in · 20 out', '1,234 in · 56 out']);
  // SPEC §6: token usage is shown as text containing "tokens".
  for (const u of await usage.all()) await expect(u).toContainText('tokens');
  await expect(page.getByTestId('session-usage')).toContainText('2,434 in · 76 out');
}

for (const c of cases) {
  test(`${c.vendorName}: a run_command call is approved, its result reaches the vendor, the answer shows its usage, and the system prompt carries the workspace and the typed instructions`, async ({ page }) => {
    const marker = `Answer like a pirate. Marker ${c.vendorModel}-7f3a.`;
    const workspace = path.join(srv.workspace, c.vendorModel);
    fs.mkdirSync(workspace, { recursive: true });
    const command = `echo fake-vendor-ok-${c.vendorModel}`;
    const answer = `Arr, the command said fake-vendor-ok (${c.vendorName}).`;
    vendor.script(c.vendorModel, [
      { text: 'I will run it.', toolCalls: [{ id: c.callId, name: 'run_command', arguments: { command } }], usage: { input: 1200, output: 20 } },
      { text: answer, usage: { input: 1234, output: 56 } },
    ]);
    const since = vendor.requests.length;

    await loginAt(page, srv.baseURL);
    await newVendorSession(page, `vendor ${c.vendorModel}`, c.model, workspace, marker);
    // The instructions are shown collapsed at the top of the transcript.
    const shown = page.getByTestId('instructions');
    await expect(shown).toContainText('Instructions');
    await expect(shown).toContainText(marker);
    await expect(shown).not.toHaveAttribute('open');

    await send(page, 'Please run the check command.');
    const card = toolCard(page, 'run_command');
    await expect(card).toContainText(command);
    const prompt = approvalGroup(card, 'run_command');
    await expect(prompt).toBeVisible();
    await prompt.getByRole('button', { name: 'Approve', exact: true }).click();
    await expectFinalText(page, answer);
    await expect(card).toContainText(`fake-vendor-ok-${c.vendorModel}`);

    // What the vendor received: two streamed requests; the second replays the call and carries
    // its output as the tool result.
    const got = vendor.requestsFor(c.vendorModel, since);
    expect(got.map((r) => r.api)).toEqual([c.api, c.api]);
    for (const r of got) {
      expect(r.body.stream).toBe(true);
      expect([r.headers['authorization'], r.headers['x-api-key']]).toContainEqual(expect.stringMatching(/^(Bearer )?test$/));
      expect(toolNames(r)).toContain('run_command');
    }
    expect(toolResult(got[0], c.callId)).toBeUndefined();
    expect(replaysToolCall(got[1], c.callId)).toBe(true);
    expect(toolResult(got[1], c.callId)).toContain(`fake-vendor-ok-${c.vendorModel}`);
    if (c.api === 'openai-chat') {
      // Chat Completions reports usage only when asked.
      expect(got[0].body.stream_options?.include_usage).toBe(true);
    }

    // Acceptance 3: the system prompt names the session's workspace and holds the typed
    // instructions, on every request.
    for (const r of got) {
      const system = systemPrompt(r);
      expect(system).toContain(workspace);
      expect(system).toContain(marker);
    }

    // The usage the vendor reported: per assistant message, and the session's total.
    await expectUsage(page);
    // The same after a reload (from the store, not only the live events).
    await page.reload();
    await expectUsage(page);
    await expect(page.getByTestId('instructions')).toContainText(marker);
  });

  test(`${c.vendorName}: a tool call's card shows its arguments while they stream and asks only once they are complete`, async ({ page }) => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    const command = `echo streamed-card-${c.vendorModel}`;
    const sent = JSON.stringify({ command }).slice(0, 20); // {"command":"echo str
    vendor.script(c.vendorModel, [
      {
        toolCalls: [{ id: `${c.callId}s`, name: 'run_command', arguments: { command } }], usage: { input: 300, output: 12 },
        hold: { afterArgumentChars: sent.length, until: released },
      },
      { text: `Streamed call done (${c.vendorName}).`, usage: { input: 320, output: 8 } },
    ]);
    try {
      await loginAt(page, srv.baseURL);
      await expectOffered(page, c.model);
      await newSession(page, `streaming ${c.vendorModel}`, c.model);
      await send(page, 'Run a command.');

      // The vendor holds the stream inside the arguments: the card is there, streaming, with
      // the arguments so far, and nothing asks yet.
      const card = toolCard(page, 'run_command');
      await expect(card).toHaveAttribute('data-state', 'streaming');
      await expect(card).toContainText(sent);
      await expect(anyApprovalGroup(card)).toHaveCount(0);
      await expect(page.getByRole('group', { name: /^Approval required: / })).toHaveCount(0);

      release();
      await expect(approvalGroup(card, 'run_command')).toBeVisible();
      await expect(card).not.toHaveAttribute('data-state', 'streaming');
      await expect(card).toContainText(command);
      await expect(toolCard(page, 'run_command')).toHaveCount(1);
      await approvalGroup(card, 'run_command').getByRole('button', { name: 'Approve', exact: true }).click();
      await expectFinalText(page, `Streamed call done (${c.vendorName}).`);
      await expect(card).toContainText(`streamed-card-${c.vendorModel}`);
    } finally {
      release();
    }
  });

  test(`${c.vendorName}: a 429 is retried after the vendor's Retry-After and the wait is shown`, async ({ page }) => {
    const answer = `Answered after one retry (${c.vendorName}).`;
    vendor.script(c.vendorModel, [
      { error: { status: 429, message: 'Rate limit reached (fake vendor).', retryAfterSeconds: 2 } },
      { text: answer, usage: { input: 210, output: 9 } },
    ]);
    const since = vendor.requests.length;
    await loginAt(page, srv.baseURL);
    await expectOffered(page, c.model);
    await newSession(page, `retry ${c.vendorModel}`, c.model);
    await send(page, 'Say something.');
    const status = transcript(page).getByTestId('retry-status');
    await expect(status).toHaveText('retrying (429) in 2 s');
    await expectFinalText(page, answer);
    await expect(status).toHaveCount(0);
    expect(vendor.requestsFor(c.vendorModel, since)).toHaveLength(2);
  });
}

test('Stop during a retry wait ends the run without sending the retry', async ({ page }) => {
  const c = cases[2];
  vendor.script(c.vendorModel, [
    // Long enough that a wait Stop did not cancel would outlast every expectation below.
    { error: { status: 429, message: 'Rate limit reached (fake vendor).', retryAfterSeconds: 30 } },
    { text: 'This answer must never be asked for.', usage: { input: 1, output: 1 } },
  ]);
  const since = vendor.requests.length;
  await loginAt(page, srv.baseURL);
  await expectOffered(page, c.model);
  await newSession(page, 'retry stopped', c.model);
  await send(page, 'Say something.');
  const status = transcript(page).getByTestId('retry-status');
  await expect(status).toHaveText('retrying (429) in 30 s');
  await stopButton(page).click();
  await expect(stopButton(page)).toBeHidden();
  await expect(status).toHaveCount(0);
  await expect(transcript(page)).not.toContainText('This answer must never be asked for.');
  expect(vendor.requestsFor(c.vendorModel, since)).toHaveLength(1);
});

test('acceptance 4: past -context-tokens 2000 the run keeps going, the oldest tool results are sent shortened and the transcript says so, and the page and the store keep them whole', async ({ page }, info) => {
  const name = `vendors-context-${info.workerIndex}`;
  fs.rmSync(path.resolve(__dirname, '../.tmp', name), { recursive: true, force: true });
  const own = await startOwnServer(name, 0, ['-context-tokens', '2000'], vendorEnv);
  try {
    // Five files of about 2 KB (some 500 tokens each): together far over the 2,000-token window,
    // each alone well inside it.
    const files = [1, 2, 3, 4, 5].map((n) => {
      const lines = Array.from({ length: 40 }, (_, i) => `ctx-${n} line ${String(i + 1).padStart(3, '0')}: the quick brown fox jumps over the lazy dog.`);
      const content = `${lines.join('\n')}\nEND-OF-ctx-${n}\n`;
      fs.writeFileSync(path.join(own.workspace, `ctx-${n}.txt`), content);
      return { n, path: `ctx-${n}.txt`, id: `call_ctx${n}`, end: `END-OF-ctx-${n}` };
    });
    const answer = 'Read all five files.';
    // The vendor reports each request's own size as its usage, as a real one would.
    vendor.script(OPENAI_MODEL, [
      ...files.map((f) => ({ toolCalls: [{ id: f.id, name: 'read_file', arguments: { path: f.path } }], usage: 'from-body' as const })),
      { text: answer, usage: 'from-body' },
    ]);
    const since = vendor.requests.length;

    await loginAt(page, own.baseURL);
    const id = await newSession(page, 'context budget', `openai:${OPENAI_MODEL}`);
    // Only read_file is declared, so the instructions and tools leave room for the transcript.
    const auth = { Authorization: `Bearer ${OWNER_TOKEN}` };
    const put = await page.request.put(`${own.baseURL}/api/sessions/${id}/tools`, { headers: auth, data: { active: ['read_file'] } });
    expect(put.status(), await put.text()).toBe(200);

    await send(page, 'Read the five ctx files, one at a time.');
    await expectFinalText(page, answer);

    // What was sent last: the oldest results as the stub, the newest whole, every call paired.
    const got = vendor.requestsFor(OPENAI_MODEL, since);
    expect(got).toHaveLength(files.length + 1);
    const last = got[got.length - 1];
    const sent = files.map((f) => toolResult(last, f.id));
    const stub = /^\[result shortened for the model: \d+(\.\d)? KB, see the transcript\]$/;
    const shortened = sent.filter((t) => t !== undefined && stub.test(t)).length;
    expect(shortened, `results sent shortened in the last request: ${JSON.stringify(sent)}`).toBeGreaterThanOrEqual(2);
    sent.forEach((t, i) => {
      if (i < shortened) expect(t, files[i].path).toMatch(stub);
      else expect(t, files[i].path).toContain(files[i].end);
    });
    for (const f of files) expect(replaysToolCall(last, f.id), f.id).toBe(true);

    // The transcript says so, for the answer's request.
    const notes = transcript(page).getByTestId('shortened-note');
    await expect(notes.last()).toHaveText(`${shortened} earlier tool results shortened for the model`);
    for (const note of await notes.all()) await expect(note).toHaveText(/^\d+ earlier tool results? shortened for the model$/);

    // The page and the store still hold every result whole.
    const cards = toolCard(page, 'read_file');
    await expect(cards).toHaveCount(files.length);
    for (const f of files) await expect(cards.filter({ hasText: f.end }), f.path).toHaveCount(1);
    const stored = JSON.stringify(await (await page.request.get(`${own.baseURL}/api/sessions/${id}`, { headers: auth })).json());
    for (const f of files) expect(stored, f.path).toContain(f.end);
    expect(stored).not.toContain('[result shortened for the model');

    // After a reload, from the store: the same note, the same whole results.
    await page.reload();
    await expect(transcript(page).getByTestId('shortened-note').last()).toHaveText(`${shortened} earlier tool results shortened for the model`);
    for (const f of files) await expect(toolCard(page, 'read_file').filter({ hasText: f.end }), f.path).toHaveCount(1);
  } finally {
    await own.kill();
  }
});
