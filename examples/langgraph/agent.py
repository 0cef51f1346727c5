# LangGraph's interrupt answered by Countersign (README: "LangGraph"). The tool node pauses with
# interrupt(); the driver sends the pending call to Countersign (POST + long poll) and resumes the
# graph with Command(resume=decision). A checkpointer keeps the pause across restarts; the
# Idempotency-Key kept beside it finds the same request again. Not run by a test here.
import json, os, urllib.request, uuid
from datetime import datetime, timezone
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph, START, END
from langgraph.types import Command, interrupt

def countersign(tool, args, key, timeout="30m"):
    base, auth = os.environ["COUNTERSIGN_URL"] + "/aap", {"Authorization": "Bearer " + os.environ["COUNTERSIGN_AGENT_TOKEN"]}
    def call(method, path, body=None, headers={}):
        req = urllib.request.Request(base + path, method=method, data=body and json.dumps(body).encode(),
                                     headers={**auth, "Content-Type": "application/json", **headers})
        with urllib.request.urlopen(req, timeout=40) as res:  # an HTTP error raises: never an approval
            return json.load(res)
    r = call("POST", "/v1/requests", {"tool": tool, "arguments": args, "timeout": timeout}, {"Idempotency-Key": key})
    while r["status"] == "pending":
        r = call("GET", f"/v1/requests/{r['id']}?wait=30s")
    d = r.get("decision") or {}
    return {"approved": r["status"] == "approved", "expires_at": d.get("expires_at"), "note": d.get("note", r["status"])}

def usable(decision):  # AAP: an approved call must start before decision.expires_at
    exp = decision.get("expires_at")
    return decision["approved"] and exp is not None and \
        datetime.now(timezone.utc) < datetime.fromisoformat(exp.replace("Z", "+00:00"))

def refund(state):
    decision = interrupt({"tool": "issue_refund", "arguments": state["call"]})
    if not usable(decision):
        return {"result": "not run: " + decision["note"]}
    return {"result": f"refunded {state['call']['amount']} on {state['call']['payment_id']}"}

g = StateGraph(dict)
g.add_node("refund", refund); g.add_edge(START, "refund"); g.add_edge("refund", END)
graph = g.compile(checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "refund-1"}}
out = graph.invoke({"call": {"payment_id": "payment_123", "amount": 4900}}, config)
while "__interrupt__" in out:
    ask = out["__interrupt__"][0].value
    out = graph.invoke(Command(resume=countersign(ask["tool"], ask["arguments"], key=str(uuid.uuid4()))), config)
print(out["result"])
