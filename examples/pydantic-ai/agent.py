# Pydantic AI's deferred tools answered by Countersign (README: "Pydantic AI"). A tool with
# requires_approval=True ends the run with DeferredToolRequests; each approval is asked of
# Countersign (POST + long poll) and the run goes on with DeferredToolResults: True runs the
# call, ToolDenied(note) tells the model why not. Not run by a test here (needs a model).
import json, os, urllib.request, uuid
from datetime import datetime, timezone
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied

def countersign(tool, args, timeout="30m"):
    base, auth = os.environ["COUNTERSIGN_URL"] + "/aap", {"Authorization": "Bearer " + os.environ["COUNTERSIGN_AGENT_TOKEN"]}
    def call(method, path, body=None, headers={}):
        req = urllib.request.Request(base + path, method=method, data=body and json.dumps(body).encode(),
                                     headers={**auth, "Content-Type": "application/json", **headers})
        with urllib.request.urlopen(req, timeout=40) as res:  # an HTTP error raises: never an approval
            return json.load(res)
    r = call("POST", "/v1/requests", {"tool": tool, "arguments": args, "timeout": timeout}, {"Idempotency-Key": str(uuid.uuid4())})
    while r["status"] == "pending":
        r = call("GET", f"/v1/requests/{r['id']}?wait=30s")
    d = r.get("decision") or {}
    # AAP: an approved call must start before decision.expires_at; past it, ask again.
    fresh = d.get("expires_at") is not None and \
        datetime.now(timezone.utc) < datetime.fromisoformat(d["expires_at"].replace("Z", "+00:00"))
    return r["status"] == "approved" and fresh, d.get("note") or r["status"]

agent = Agent("openai:gpt-5-mini", output_type=[str, DeferredToolRequests])

@agent.tool_plain(requires_approval=True)
def issue_refund(payment_id: str, amount: int) -> str:
    return f"refunded {amount} on {payment_id}"

result = agent.run_sync("Refund payment_123 (4900 pence).")
while isinstance(result.output, DeferredToolRequests):
    answers = DeferredToolResults()
    for call in result.output.approvals:
        ok, note = countersign(call.tool_name, call.args_as_dict())
        answers.approvals[call.tool_call_id] = True if ok else ToolDenied(note)
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=answers)
print(result.output)
