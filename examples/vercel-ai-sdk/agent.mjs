// The Vercel AI SDK's needsApproval answered by Countersign (README: "Vercel AI SDK"). A tool
// marked needsApproval makes generateText stop with a tool-approval-request; each is sent to
// Countersign and its decision goes back as a tool-approval-response, then the loop goes on: an
// approved call runs, a denied one reaches the model as execution-denied with the person's note.
// The model here is the SDK's own mock (ai/test), so the example runs offline; swap in any model.
import { generateText, jsonSchema, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { countersign } from './countersign.mjs';

const ran = [];
const tools = {
  issue_refund: tool({
    description: 'Refund a payment',
    inputSchema: jsonSchema({ type: 'object', properties: { payment_id: { type: 'string' }, amount: { type: 'number' } }, required: ['payment_id', 'amount'] }),
    needsApproval: true,
    execute: async ({ payment_id, amount }) => { ran.push(payment_id); return { refunded: amount, payment_id }; },
  }),
};

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const payment = process.argv[2] ?? 'payment_123';
// First the model calls the tool; once it sees the tool's outcome it says what it saw.
const model = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    const last = prompt[prompt.length - 1];
    if (last.role === 'tool') {
      return { content: [{ type: 'text', text: 'model saw: ' + JSON.stringify(last.content.map((p) => p.output)) }],
        finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
    }
    return { content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'issue_refund', input: JSON.stringify({ payment_id: payment, amount: 4900 }) }],
      finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] };
  },
});

const messages = [{ role: 'user', content: `Refund ${payment}.` }];
for (;;) {
  const result = await generateText({ model, tools, messages });
  messages.push(...result.response.messages);
  const asks = result.content.filter((p) => p.type === 'tool-approval-request');
  if (asks.length === 0) {
    console.log(JSON.stringify({ text: result.text, ran }));
    break;
  }
  const answers = [];
  for (const ask of asks) {
    const d = await countersign(ask.toolCall.toolName, ask.toolCall.input, { context: { session_id: 'vercel-ai-sdk-example' } });
    answers.push({ type: 'tool-approval-response', approvalId: ask.approvalId, approved: d.approved, reason: d.reason });
  }
  messages.push({ role: 'tool', content: answers });
}
