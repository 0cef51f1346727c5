// The OpenAI Agents SDK's interruptions answered by Countersign (README: "OpenAI Agents SDK").
// A tool with needsApproval makes run() stop with result.interruptions; each is asked of
// Countersign (POST + long poll, ../vercel-ai-sdk/countersign.mjs) and approved or rejected on
// the run's state, then the run resumes from that state. With --mock the model is a scripted
// stand-in (it calls the tool once, then says what it saw), so the example runs offline; without
// it, the SDK's default OpenAI model is used (OPENAI_API_KEY).
import { Agent, Usage, run, tool } from '@openai/agents';
import { z } from 'zod';
import { countersign } from '../vercel-ai-sdk/countersign.mjs';

const ran = [];
const issueRefund = tool({
  name: 'issue_refund',
  description: 'Refund a payment',
  parameters: z.object({ payment_id: z.string(), amount: z.number() }),
  needsApproval: true,
  execute: async ({ payment_id, amount }) => { ran.push(payment_id); return `refunded ${amount} on ${payment_id}`; },
});

const payment = process.argv.find((a) => a.startsWith('payment_')) ?? 'payment_123';
const usage = new Usage();
const mock = {
  async getResponse(request) {
    const items = Array.isArray(request.input) ? request.input : [];
    const result = items.find((i) => i.type === 'function_call_result');
    if (result) {
      return { usage, output: [{ type: 'message', role: 'assistant', status: 'completed',
        content: [{ type: 'output_text', text: 'model saw: ' + JSON.stringify(result.output) }] }] };
    }
    return { usage, output: [{ type: 'function_call', callId: 'call-1', name: 'issue_refund', status: 'completed',
      arguments: JSON.stringify({ payment_id: payment, amount: 4900 }) }] };
  },
  async *getStreamedResponse() { throw new Error('not streamed'); },
};

const agent = new Agent({ name: 'Billing', instructions: 'Refund when asked.', tools: [issueRefund],
  ...(process.argv.includes('--mock') ? { model: mock } : {}) });

let result = await run(agent, `Refund ${payment} (49.00 GBP).`);
while (result.interruptions?.length) {
  for (const item of result.interruptions) {
    const args = typeof item.rawItem.arguments === 'string' ? JSON.parse(item.rawItem.arguments) : item.rawItem.arguments;
    const d = await countersign(item.rawItem.name, args, { context: { session_id: 'openai-agents-example' } });
    if (d.approved) result.state.approve(item);
    else result.state.reject(item);
  }
  result = await run(agent, result.state);
}
console.log(JSON.stringify({ text: result.finalOutput, ran }));
