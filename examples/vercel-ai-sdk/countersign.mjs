// Countersign as the approver of an SDK agent's tool calls, through the Agent Approval Protocol v1
// (SPEC §18 Door 3). One function: the pause becomes POST /aap/v1/requests, the wait a long poll
// (GET ?wait=30s, again while pending), the resume the decision. No dependency but fetch.
//
//   COUNTERSIGN_URL           the server, e.g. https://countersign.example.com
//   COUNTERSIGN_AGENT_TOKEN   an api connection's token (Agents page), the AAP instance credential
import { randomUUID } from 'node:crypto';

/**
 * Asks Countersign whether toolName may run with input; resolves when a person (or a rule)
 * decided: { approved, reason }. approved is true only for an approval still valid now
 * (decision.expires_at). Throws on a transport or protocol error: an error is never an approval.
 */
export async function countersign(toolName, input, { timeout = '30m', context, reasoning } = {}) {
  const base = `${process.env.COUNTERSIGN_URL}/aap`;
  const auth = { Authorization: `Bearer ${process.env.COUNTERSIGN_AGENT_TOKEN}` };
  // One key per execution attempt: a retry after a lost answer reuses it (AAP v1 §5).
  const key = randomUUID();
  const body = JSON.stringify({ tool: toolName, arguments: input, timeout, context, agent_reasoning: reasoning });
  let res = await fetch(`${base}/v1/requests`, {
    method: 'POST', headers: { ...auth, 'Content-Type': 'application/json', 'Idempotency-Key': key }, body,
  });
  let req = await answer(res);
  while (req.status === 'pending') {
    req = await answer(await fetch(`${base}/v1/requests/${req.id}?wait=30s`, { headers: auth }));
  }
  const approved = req.status === 'approved' && Date.now() < Date.parse(req.decision.expires_at);
  return { approved, reason: req.decision?.note || `the request was ${req.status}`, request: req };
}

async function answer(res) {
  const json = await res.json();
  if (!res.ok) throw new Error(`Countersign ${res.status}: ${json.error?.code}: ${json.error?.message}`);
  return json;
}
