package aaptest

import "testing"

// The spec's own examples pass, and documents that break it do not: the copy of the schemas is
// read as the contract means.
func TestSchemasAcceptTheSpecsExamplesAndRefuseOthers(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		ok        bool
	}{
		{"CreateApprovalRequest", `{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m"}`, true},
		{"CreateApprovalRequest", `{"tool":"issue_refund","arguments":{},"timeout":"30m","extra":1}`, false},
		{"CreateApprovalRequest", `{"tool":"issue_refund","arguments":{},"timeout":"30 minutes"}`, false},
		{"ApprovalRequest", `{"id":"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71","tool":"issue_refund","arguments":{},"timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"}`, true},
		{"ApprovalRequest", `{"id":"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71","tool":"issue_refund","arguments":{},"timeout":"30m","status":"approved","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z","decision":{"status":"approved","note":"ok","decided_at":"2026-09-16T12:02:00Z","expires_at":"2026-09-16T12:07:00Z"}}`, true},
		{"ApprovalRequest", `{"id":"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71","tool":"issue_refund","arguments":{},"timeout":"30m","status":"approved","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z","decision":{"status":"approved","decided_at":"2026-09-16T12:02:00Z"}}`, false},
		{"ApprovalRequest", `{"id":"not-a-uuid","tool":"t","arguments":{},"timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z","deadline_at":"2026-09-16T12:30:00Z"}`, false},
		{"ApprovalRequest", `{"id":"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71","tool":"t","arguments":{},"timeout":"30m","status":"denied","created_at":"2026-09-16T12:00:00+01:00","deadline_at":"2026-09-16T12:30:00Z","decision":{"status":"denied","decided_at":"2026-09-16T12:02:00Z"}}`, false},
		{"ErrorResponse", `{"error":{"type":"conflict","code":"idempotency_conflict","message":"m","request_id":"1184dfc5-0e86-4f88-9b68-882b1dc60467"}}`, true},
		{"ErrorResponse", `{"error":{"type":"conflict","code":"Idempotency-Conflict","message":"m","request_id":"1184dfc5-0e86-4f88-9b68-882b1dc60467"}}`, false},
	} {
		err := Validate(c.name, []byte(c.doc))
		if (err == nil) != c.ok {
			t.Errorf("%s %s: %v, want ok=%v", c.name, c.doc, err, c.ok)
		}
	}
}
