import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

// A local stand-in for the model vendors' HTTP APIs, for the browser tests of issue 18 (SPEC §17
// "Tested without the internet"): no machine here reaches a real vendor, so the Countersign server
// under test is pointed at this server with OPENAI_BASE_URL=<url>/v1 and ANTHROPIC_BASE_URL=<url>.
// It speaks just enough of three streaming APIs, in the shapes the vendors document:
//
//   - OpenAI Chat Completions, `POST /v1/chat/completions` with `"stream": true`: server-sent
//     events `data: <chat.completion.chunk>` ending in `data: [DONE]`; text as `delta.content`
//     pieces; a tool call as `delta.tool_calls` pieces (the first with index, id, type and
//     function.name, the rest with index and a piece of function.arguments); a closing chunk with
//     `finish_reason`; then, only when the request set `stream_options.include_usage`, one chunk
//     with `"choices": []` and the request's `usage` (earlier chunks then carry `"usage": null`).
//     (OpenAI API reference, "The chat completion chunk object" and `stream_options`.)
//   - OpenAI Responses, `POST /v1/responses` with `"stream": true`: events `response.created`,
//     `response.in_progress`, then per output item `response.output_item.added`, for a message
//     `response.content_part.added` / `response.output_text.delta` / `response.output_text.done`
//     / `response.content_part.done`, for a function call `response.function_call_arguments.delta`
//     / `.done`, then `response.output_item.done`; last `response.completed` with the whole
//     response and its `usage` (no `[DONE]`). Every event carries a `sequence_number`. (OpenAI
//     API reference, "Responses streaming events".)
//   - Anthropic Messages, `POST /v1/messages` with `"stream": true`: events `message_start` (the
//     message with `usage.input_tokens`), `content_block_start` / `content_block_delta`
//     (`text_delta`, `input_json_delta` with `partial_json` pieces) / `content_block_stop` per
//     block, a `ping`, `message_delta` (`stop_reason`, `usage.output_tokens`, cumulative) and
//     `message_stop`. (Anthropic docs, "Streaming Messages".)
//   - Errors, for any of them: the status with the vendor's error body (`{"error": {"message",
//     "type", ...}}`, Anthropic's with `"type": "error"`) and, when scripted, `retry-after`.
//
// What it answers is scripted per model name (the request's `model`): each request for a model
// takes the next reply of that model's script. It records every request (path, headers, parsed
// body) so a test can assert what Countersign sent: the system prompt, the declared tools, the
// tool results. A request it cannot answer (unknown path, no `stream: true`, a script run dry)
// gets a 400 with the vendor's error shape and a message saying why, which Countersign shows as
// the run's error: a test then fails on a clear message instead of a hang.

/** Token counts for one reply, in the neutral shape; each API words them its own way. */
export interface FakeUsage {
  /** Input (prompt) tokens not read from a cache. */
  input: number;
  /** Output (completion) tokens. */
  output: number;
}

/** One scripted reply: a streamed message (FakeMessage) or an HTTP error (FakeError). */
export type FakeReply = FakeMessage | FakeError;

/** A streamed assistant message: optional text, then optional tool calls, and its usage. */
export interface FakeMessage {
  /** Answer text, streamed in a few pieces. */
  text?: string;
  /** Tool calls, streamed after the text; `id` is the vendor's call id. */
  toolCalls?: { id: string; name: string; arguments: Record<string, unknown> }[];
  /**
   * The usage the stream reports (Chat Completions: only when the request asks with
   * include_usage). 'from-body' reports the request's own size as a tokenizer would roughly
   * count it, 4 bytes of its JSON body per input token, and 20 output tokens.
   */
  usage: FakeUsage | 'from-body';
  /**
   * Pauses the stream inside the first tool call: once the first `afterArgumentChars` characters
   * of its JSON arguments are sent, nothing more is sent until `until` settles (or the client
   * goes away). Lets a test see a call whose arguments are still streaming.
   */
  hold?: { afterArgumentChars: number; until: Promise<unknown> };
}

/**
 * An error answer instead of a stream: `status` (429, 500, ...) with the vendor's error body
 * and `message`, and a `retry-after` header (seconds) when `retryAfterSeconds` is set. The
 * SDKs retry a 429 or 5xx; the retry takes the model's next reply.
 */
export interface FakeError {
  error: { status: number; message: string; retryAfterSeconds?: number };
}

/** Which vendor API a request used. */
export type FakeApi = 'openai-chat' | 'openai-responses' | 'anthropic-messages';

/** A request the fake vendor received. */
export interface RecordedRequest {
  api: FakeApi;
  path: string;
  /** Header names in lower case. */
  headers: http.IncomingHttpHeaders;
  /** The JSON body, parsed. */
  body: any;
}

/** The fake vendor server. Start it with FakeVendor.start(); close it when done. */
export class FakeVendor {
  /** Every request received, in order. */
  readonly requests: RecordedRequest[] = [];
  private readonly scripts = new Map<string, FakeReply[]>();

  private constructor(private readonly server: http.Server, readonly url: string) {}

  /** Starts a fake vendor on 127.0.0.1 and a free port; `url` is its root (no trailing slash). */
  static async start(): Promise<FakeVendor> {
    let vendor: FakeVendor | undefined;
    const server = http.createServer((req, res) => {
      vendor!.handle(req, res).catch((err) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `fake vendor: ${String(err)}` } }));
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    vendor = new FakeVendor(server, `http://127.0.0.1:${port}`);
    return vendor;
  }

  /** Sets the replies for requests naming `model`, replacing any left from before. */
  script(model: string, replies: FakeReply[]): void {
    this.scripts.set(model, [...replies]);
  }

  /** The requests that named `model`, in order, from the `since`-th request received on. */
  requestsFor(model: string, since = 0): RecordedRequest[] {
    return this.requests.slice(since).filter((r) => r.body?.model === model);
  }

  /** Stops listening and closes open connections. */
  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const routes: Record<string, FakeApi> = {
      '/v1/chat/completions': 'openai-chat', '/v1/responses': 'openai-responses', '/v1/messages': 'anthropic-messages',
    };
    const api: FakeApi | undefined = req.method === 'POST' ? routes[path] : undefined;
    if (!api) {
      return refuse(res, 'openai-chat', 404, `fake vendor: no route for ${req.method} ${path}`);
    }
    let body: any;
    try {
      body = JSON.parse(raw);
    } catch {
      return refuse(res, api, 400, `fake vendor: the body is not JSON: ${raw.slice(0, 200)}`);
    }
    this.requests.push({ api, path, headers: req.headers, body });
    if (body?.stream !== true) return refuse(res, api, 400, 'fake vendor: only streaming requests ("stream": true) are scripted');
    const model = String(body.model ?? '');
    const reply = this.scripts.get(model)?.shift();
    if (!reply) return refuse(res, api, 400, `fake vendor: no scripted reply left for model "${model}"`);
    if ('error' in reply) {
      const { status, message, retryAfterSeconds } = reply.error;
      return refuse(res, api, status, message, retryAfterSeconds === undefined ? {} : { 'retry-after': String(retryAfterSeconds) });
    }
    const usage = reply.usage === 'from-body' ? { input: Math.ceil(Buffer.byteLength(raw) / 4), output: 20 } : reply.usage;
    const message = { ...reply, usage };
    const gone = new Promise<void>((resolve) => res.once('close', () => resolve()));
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const events = api === 'openai-chat' ? openaiEvents(model, message, body.stream_options?.include_usage === true)
      : api === 'openai-responses' ? responsesEvents(model, message) : anthropicEvents(model, message);
    for (const e of events) {
      if (e !== HOLD) {
        res.write(e);
        continue;
      }
      await Promise.race([reply.hold!.until, gone]);
      if (res.destroyed) return;
    }
    res.end();
  }
}

/** Answers `status` with the vendor's error body shape (400 and 404 are never retried). */
function refuse(res: http.ServerResponse, api: FakeApi, status: number, message: string, headers: http.OutgoingHttpHeaders = {}): void {
  const type = status === 429 ? 'rate_limit_error' : status >= 500 ? 'api_error' : 'invalid_request_error';
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(api === 'anthropic-messages'
    ? { type: 'error', error: { type, message } }
    : { error: { message, type, param: null, code: null } }));
}

/** Splits text into up to `n` pieces, so a stream carries it in several deltas ("" gives none). */
export function pieces(text: string, n = 3): string[] {
  const size = Math.max(1, Math.ceil(text.length / n));
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/** A FakeMessage with its usage worked out. */
type Concrete = FakeMessage & { usage: FakeUsage };

/** Where a stream pauses for FakeMessage.hold. */
const HOLD = Symbol('hold');

/** What a stream generator yields: an SSE event's text, or HOLD. */
type Piece = string | typeof HOLD;

/**
 * The pieces of tool call number `n`'s JSON arguments: a few, with HOLD after the first
 * `hold.afterArgumentChars` characters when `n` is 0 and the reply holds.
 */
function argumentPieces(reply: FakeMessage, n: number): Piece[] {
  const args = JSON.stringify(reply.toolCalls![n].arguments);
  if (n !== 0 || !reply.hold) return pieces(args, 4);
  const at = Math.min(reply.hold.afterArgumentChars, args.length);
  return [...pieces(args.slice(0, at), 2), HOLD, ...pieces(args.slice(at), 2)];
}

let sequence = 0;

/** The events of a Chat Completions stream for `reply`. */
function* openaiEvents(model: string, reply: Concrete, includeUsage: boolean): Generator<Piece> {
  const id = `chatcmpl-fake${++sequence}`;
  const created = 1767312000;
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => {
    const c: Record<string, unknown> = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake', choices, ...extra };
    if (includeUsage && !('usage' in extra)) c.usage = null;
    return `data: ${JSON.stringify(c)}\n\n`;
  };
  const choice = (delta: Record<string, unknown>, finish: string | null = null) =>
    ({ index: 0, delta, logprobs: null, finish_reason: finish });

  yield chunk([choice({ role: 'assistant', content: '', refusal: null })]);
  for (const p of pieces(reply.text ?? '')) yield chunk([choice({ content: p })]);
  for (const [index, call] of (reply.toolCalls ?? []).entries()) {
    yield chunk([choice({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] })]);
    for (const p of argumentPieces(reply, index)) {
      yield p === HOLD ? p : chunk([choice({ tool_calls: [{ index, function: { arguments: p } }] })]);
    }
  }
  yield chunk([choice({}, reply.toolCalls?.length ? 'tool_calls' : 'stop')]);
  if (includeUsage) {
    const { input, output } = reply.usage;
    yield chunk([], {
      usage: {
        prompt_tokens: input, completion_tokens: output, total_tokens: input + output,
        prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
      },
    });
  }
  yield 'data: [DONE]\n\n';
}

/** The events of a Responses API stream for `reply`. */
function* responsesEvents(model: string, reply: Concrete): Generator<Piece> {
  let seq = 0;
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data, sequence_number: seq++ })}\n\n`;
  const id = `resp_fake${++sequence}`;
  const response = (status: string, output: unknown[], usage: unknown) => ({
    id, object: 'response', created_at: 1767312000, status, model, output, usage, error: null,
    incomplete_details: null, instructions: null, parallel_tool_calls: true, tool_choice: 'auto', tools: [],
    store: false, text: { format: { type: 'text' } }, truncation: 'disabled',
  });
  yield event('response.created', { response: response('in_progress', [], null) });
  yield event('response.in_progress', { response: response('in_progress', [], null) });
  const output: Record<string, unknown>[] = [];
  if (reply.text) {
    const itemId = `msg_fake${sequence}`;
    const output_index = output.length;
    const item = { type: 'message', id: itemId, status: 'in_progress', role: 'assistant', content: [] as unknown[] };
    yield event('response.output_item.added', { output_index, item });
    const part = { type: 'output_text', text: '', annotations: [] as unknown[], logprobs: [] as unknown[] };
    yield event('response.content_part.added', { item_id: itemId, output_index, content_index: 0, part });
    for (const p of pieces(reply.text)) {
      yield event('response.output_text.delta', { item_id: itemId, output_index, content_index: 0, delta: p, logprobs: [] });
    }
    yield event('response.output_text.done', { item_id: itemId, output_index, content_index: 0, text: reply.text, logprobs: [] });
    const done = { ...part, text: reply.text };
    yield event('response.content_part.done', { item_id: itemId, output_index, content_index: 0, part: done });
    const finished = { ...item, status: 'completed', content: [done] };
    yield event('response.output_item.done', { output_index, item: finished });
    output.push(finished);
  }
  for (const [n, call] of (reply.toolCalls ?? []).entries()) {
    const output_index = output.length;
    const itemId = `fc_fake${sequence}_${output_index}`;
    const args = JSON.stringify(call.arguments);
    const item = { type: 'function_call', id: itemId, call_id: call.id, name: call.name, arguments: '', status: 'in_progress' };
    yield event('response.output_item.added', { output_index, item });
    for (const p of argumentPieces(reply, n)) {
      yield p === HOLD ? p : event('response.function_call_arguments.delta', { item_id: itemId, output_index, delta: p });
    }
    yield event('response.function_call_arguments.done', { item_id: itemId, output_index, arguments: args });
    const finished = { ...item, arguments: args, status: 'completed' };
    yield event('response.output_item.done', { output_index, item: finished });
    output.push(finished);
  }
  const { input, output: out } = reply.usage;
  yield event('response.completed', {
    response: response('completed', output, {
      input_tokens: input, input_tokens_details: { cached_tokens: 0 },
      output_tokens: out, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + out,
    }),
  });
}

/** The events of a Messages API stream for `reply`. */
function* anthropicEvents(model: string, reply: Concrete): Generator<Piece> {
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  yield event('message_start', {
    message: {
      id: `msg_fake${++sequence}`, type: 'message', role: 'assistant', model, content: [],
      stop_reason: null, stop_sequence: null,
      usage: { input_tokens: reply.usage.input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1, service_tier: 'standard' },
    },
  });
  let index = 0;
  if (reply.text) {
    yield event('content_block_start', { index, content_block: { type: 'text', text: '' } });
    yield event('ping', {});
    for (const p of pieces(reply.text)) yield event('content_block_delta', { index, delta: { type: 'text_delta', text: p } });
    yield event('content_block_stop', { index });
    index++;
  }
  for (const [n, call] of (reply.toolCalls ?? []).entries()) {
    yield event('content_block_start', { index, content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} } });
    yield event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '' } });
    for (const p of argumentPieces(reply, n)) {
      yield p === HOLD ? p : event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: p } });
    }
    yield event('content_block_stop', { index });
    index++;
  }
  yield event('message_delta', {
    delta: { stop_reason: reply.toolCalls?.length ? 'tool_use' : 'end_turn', stop_sequence: null },
    usage: { output_tokens: reply.usage.output },
  });
  yield event('message_stop', {});
}

// Readers of what Countersign sent, one per API, so tests say what they check and not how each
// vendor nests it.

/**
 * The system prompt of a recorded request: Chat Completions' system/developer messages, the
 * Responses API's `instructions` and system/developer input messages, Anthropic's `system`.
 */
export function systemPrompt(r: RecordedRequest): string {
  if (r.api === 'anthropic-messages') return textOf(r.body.system);
  const items = r.api === 'openai-responses' ? inputItems(r) : (r.body.messages ?? []);
  return [r.api === 'openai-responses' ? textOf(r.body.instructions) : '', ...items
    .filter((m: { role?: string }) => m.role === 'system' || m.role === 'developer')
    .map((m: { content: unknown }) => textOf(m.content))]
    .filter((t) => t !== '')
    .join('\n');
}

/** The Responses API's `input` as a list of items (a string input is one user message). */
function inputItems(r: RecordedRequest): any[] {
  const input = r.body.input;
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  return Array.isArray(input) ? input : [];
}

/** The tool names a recorded request declared. */
export function toolNames(r: RecordedRequest): string[] {
  return (r.body.tools ?? []).map((t: { name?: string; function?: { name: string } }) =>
    r.api === 'openai-chat' ? t.function?.name : t.name);
}

/**
 * The tool result a recorded request carries for `toolCallId` (Chat Completions: a `tool`
 * message with that `tool_call_id`; Responses: a `function_call_output` item with that
 * `call_id`; Anthropic: a `tool_result` block with that `tool_use_id` in a user message), as
 * text; undefined when there is none.
 */
export function toolResult(r: RecordedRequest, toolCallId: string): string | undefined {
  if (r.api === 'openai-responses') {
    const item = inputItems(r).find((i) => i.type === 'function_call_output' && i.call_id === toolCallId);
    return item ? textOf(item.output) : undefined;
  }
  for (const m of r.body.messages ?? []) {
    if (r.api === 'openai-chat') {
      if (m.role === 'tool' && m.tool_call_id === toolCallId) return textOf(m.content);
    } else if (m.role === 'user' && Array.isArray(m.content)) {
      const b = m.content.find((c: { type: string; tool_use_id?: string }) => c.type === 'tool_result' && c.tool_use_id === toolCallId);
      if (b) return textOf(b.content);
    }
  }
  return undefined;
}

/**
 * Whether a recorded request replays the assistant's call `toolCallId` before its result, as
 * the APIs require (Chat Completions: `tool_calls[].id` of an assistant message; Responses: a
 * `function_call` item with that `call_id`; Anthropic: a `tool_use` block of an assistant
 * message).
 */
export function replaysToolCall(r: RecordedRequest, toolCallId: string): boolean {
  if (r.api === 'openai-responses') {
    const items = inputItems(r);
    const call = items.findIndex((i) => i.type === 'function_call' && i.call_id === toolCallId);
    const result = items.findIndex((i) => i.type === 'function_call_output' && i.call_id === toolCallId);
    return call >= 0 && (result < 0 || call < result);
  }
  return (r.body.messages ?? []).some((m: { role: string; tool_calls?: { id: string }[]; content?: unknown }) =>
    m.role === 'assistant' && (r.api === 'openai-chat'
      ? (m.tool_calls ?? []).some((c) => c.id === toolCallId)
      : Array.isArray(m.content) && m.content.some((c: { type: string; id?: string }) => c.type === 'tool_use' && c.id === toolCallId)));
}

/** Text of a content value: a string, or an array of `{type: "text", text}` parts. */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('\n');
  }
  return '';
}
