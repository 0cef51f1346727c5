// The OpenAI Agents SDK's interruptions answered by Countersign (README: "OpenAI Agents SDK").
// A tool with needsApproval makes run() stop with result.interruptions; each is asked of
// Countersign (POST + long poll, ../vercel-ai-sdk/countersign.mjs) and approved or rejected on
// the run's state, then the run resumes from that state. Not run by a test here (needs a model).
import { Agent, run, tool } from '@openai/agents';
import { z } from 'zod';
import { countersign } from '../vercel-ai-sdk/countersign.mjs';

const issueRefund = tool({
  name: 'issue_refund',
  description: 'Refund a payment',
  parameters: z.object({ payment_id: z.string(), amount: z.number() }),
  needsApproval: true,
  execute: async ({ payment_id, amount }) => `refunded ${amount} on ${payment_id}`,
});
const agent = new Agent({ name: 'Billing', instructions: 'Refund when asked.', tools: [issueRefund] });

let result = await run(agent, 'Refund payment_123 (49.00 GBP).');
while (result.interruptions?.length) {
  for (const item of result.interruptions) {
    const args = typeof item.rawItem.arguments === 'string' ? JSON.parse(item.rawItem.arguments) : item.rawItem.arguments;
    const d = await countersign(item.rawItem.name, args);
    if (d.approved) result.state.approve(item);
    else result.state.reject(item);
  }
  result = await run(agent, result.state);
}
console.log(result.finalOutput);
