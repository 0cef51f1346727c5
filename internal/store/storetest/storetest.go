// Package storetest is the store conformance suite (issue 21, SPEC §16): behaviour tests written
// against store.Backend that every store implementation must pass — the SQLite store
// (internal/store) and the PostgreSQL store (internal/store/pg) — so that the JSON and page
// behaviour is identical whichever database holds the data. Tests of one implementation's
// internals (SQLite's pragmas, group commit, migrations of old files; PostgreSQL's migrations)
// stay with that implementation.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/store"
	"countersign/internal/tool"
)

// Harness opens the stores of one implementation for the suite.
type Harness struct {
	// Name names the implementation's subtests: "sqlite", "postgres".
	Name string
	// Open opens a fresh store on a new, empty database, with now as the clock for the times it
	// fills in itself (store.DB.Now). The suite closes it.
	Open func(t *testing.T, now func() time.Time) store.Backend
	// Reopen opens the database of db (made by Open, and closed by the suite already) again, as
	// a restart would, with clock now. The suite closes it.
	Reopen func(t *testing.T, db store.Backend, now func() time.Time) store.Backend
	// Require, when set, runs first in the implementation's subtest: it skips (or fails) the
	// whole backend when what it needs is missing (a PostgreSQL server), so the run says
	// "SKIP: TestConformance/postgres" rather than a pass of skipped tests.
	Require func(t *testing.T)
}

// open opens a fresh store with the suite's clock (t0, advancing one second per reading) and
// closes it when t ends.
func (h Harness) open(t *testing.T) store.Backend {
	t.Helper()
	db := h.Open(t, clock())
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// Run runs every test of the suite on h's stores, as subtests named h.Name/<test>.
func Run(t *testing.T, h Harness) {
	t.Run(h.Name, func(t *testing.T) {
		if h.Require != nil {
			h.Require(t)
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
		}
	})
}

var tests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"Sessions", testSessions},
	{"Entries", testEntries},
	{"AppendEntryConcurrent", testAppendEntryConcurrent},
	{"Approvals", testApprovals},
	{"ResolveApproval", testResolveApproval},
	{"ResolveApprovalRace", testResolveApprovalRace},
	{"Reopen", testReopen},
	{"CreateApprovalsIsAllOrNothing", testCreateApprovalsIsAllOrNothing},
	{"GroupedRecordsMergeAcrossBatches", testGroupedRecordsMergeAcrossBatches},
	{"CreateApprovalsNamesTheBadRowOfAMultiRowInsert", testCreateApprovalsNamesTheBadRowOfAMultiRowInsert},
	{"AppendEntryWithRecordsIsAllOrNothing", testAppendEntryWithRecordsIsAllOrNothing},
	{"ApprovalTextsRoundTrip", testApprovalTextsRoundTrip},
	{"OwnerSessionsExpireAndEnd", testOwnerSessionsExpireAndEnd},
	{"ApprovalPreviewRoundTrips", testApprovalPreviewRoundTrips},
	{"InstructionsAreStoredAndFixedByTheFirstEntry", testInstructionsAreStoredAndFixedByTheFirstEntry},
	{"InstructionsRaceTheFirstEntry", testInstructionsRaceTheFirstEntry},
	{"UsageIsSummedPerSession", testUsageIsSummedPerSession},
	{"LinkRightsDecidedViaAndGrantsRoundTrip", testLinkRightsDecidedViaAndGrantsRoundTrip},
	{"SharesAreStoredRevokedAndTouched", testSharesAreStoredRevokedAndTouched},
	{"RulesAreStoredCountedAndDeleted", testRulesAreStoredCountedAndDeleted},
	{"SessionModeIsStored", testSessionModeIsStored},
	{"ApprovalsKeepWhatDecidedThem", testApprovalsKeepWhatDecidedThem},
	{"ARunningSessionWithAPendingApprovalReadsAsWaiting", testARunningSessionWithAPendingApprovalReadsAsWaiting},
	{"DeleteSessionTakesEverythingOfIt", testDeleteSessionTakesEverythingOfIt},
	{"IdleSessions", testIdleSessions},
	{"Ready", testReady},
	{"PendingApprovalsQueueEventsAndLinks", testPendingApprovalsQueueEventsAndLinks},
	{"WithoutReceiversNothingIsQueued", testWithoutReceiversNothingIsQueued},
	{"ADecisionLinkIsUsedOnceEvenWhenRacing", testADecisionLinkIsUsedOnceEvenWhenRacing},
	{"TheOutboxIsWorkedThrough", testTheOutboxIsWorkedThrough},
	{"InboxListsPendingApprovalsAcrossSessionsOldestFirst", testInboxListsPendingApprovalsAcrossSessionsOldestFirst},
	{"VotesRoundTrip", testVotesRoundTrip},
	{"OneVotePerPerson", testOneVotePerPerson},
	{"VotesRacingMakeTheQuorumOnce", testVotesRacingMakeTheQuorumOnce},
	{"RuleAndShareKeepTheirPeople", testRuleAndShareKeepTheirPeople},
}

// t0 is the tests' epoch: nanoseconds set, so a lossy time round trip shows.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// clock is a store clock that starts at t0 and advances one second per reading.
func clock() func() time.Time {
	var mu sync.Mutex
	now := t0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

// assertErr checks an error's code and user message.
func assertErr(t *testing.T, err error, code apperr.Code, msg string) {
	t.Helper()
	if got := apperr.CodeOf(err); got != code {
		t.Fatalf("code = %q (err %v), want %q", got, err, code)
	}
	if got := apperr.MessageOf(err); got != msg {
		t.Fatalf("message = %q, want %q", got, msg)
	}
}

func assertEqual[T any](t *testing.T, name string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", name, dump(got), dump(want))
	}
}

func dump(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func mustCreateSession(t *testing.T, db store.Backend, s agent.Session) {
	t.Helper()
	if err := db.CreateSession(context.Background(), s); err != nil {
		t.Fatalf("CreateSession(%s): %v", s.ID, err)
	}
}

func session(id string, at time.Time) agent.Session {
	return agent.Session{ID: id, Title: "Title " + id, Model: "faux:demo", Workspace: "/work/" + id,
		State: agent.Idle, CreatedAt: at, Mode: gate.ModeDefault}
}

func mustCreateApprovals(t *testing.T, db store.Backend, as ...gate.Approval) {
	t.Helper()
	for _, a := range as {
		if err := db.CreateApproval(context.Background(), a); err != nil {
			t.Fatalf("CreateApproval(%s): %v", a.ID, err)
		}
	}
}

// transcript is one of each kind of message, tool result fields all set.
func transcript() []agent.Message {
	return []agent.Message{
		{ID: "m1", Role: agent.User, Content: []agent.Block{
			{Type: "text", Text: "List the files, then <b>delete</b> tmp & logs."},
			{Type: "image", Data: "iVBORw0KGgo=", MimeType: "image/png"},
		}, Timestamp: t0},
		{ID: "m2", Role: agent.Assistant, Model: "faux:demo", StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "text", Text: "Listing."},
			{Type: "toolCall", ID: "call_1", Name: "run_js", Arguments: json.RawMessage(`{"code":"1+1"}`)},
		}, Timestamp: t0.Add(time.Second)},
		{ID: "m3", Role: agent.ToolResult, ToolCallID: "call_1", ToolName: "run_js", Result: &tool.Result{
			Content:           []tool.Content{tool.Text("partial"), {Type: "image", Data: "AAAA", MimeType: "image/png"}},
			StructuredContent: json.RawMessage(`{"files":["a.txt","b.txt"],"count":2}`),
			IsError:           true,
			Details:           json.RawMessage(`{"stderr":"boom","exitCode":1}`),
			DurationMs:        1234,
			NestedCalls: &tool.NestedCalls{Complete: false, Calls: []tool.NestedCall{
				{ID: "n1", Name: "list_files", Arguments: json.RawMessage(`{"path":"."}`), Status: "ok", DurationMs: 3},
				{ID: "n2", Name: "delete_file", Status: "denied", DurationMs: 0, Error: "Denied by ana: no"},
			}},
			ContractViolation: &tool.ContractViolation{
				Violations:        []tool.Violation{},
				Content:           []tool.Content{tool.Text("raw")},
				StructuredContent: json.RawMessage(`{"x":1}`),
			},
		}, Timestamp: t0.Add(2 * time.Second)},
		{ID: "m4", Role: agent.Assistant, StopReason: agent.Error, ErrorMessage: "provider failed",
			Timestamp: t0.Add(3 * time.Second)},
	}
}

// approvals are one pending and several decided approvals, every field set somewhere, with
// annotations absent, false, true and mixed.
func approvals() []gate.Approval {
	decided := t0.Add(90 * time.Second)
	return []gate.Approval{
		{ID: "a1", SessionID: "s1", MessageID: "m2", ToolCallID: "call_1", ToolName: "run_command",
			ToolTitle: "Run a command", Arguments: json.RawMessage(`{"command": "rm -rf tmp"}`),
			Annotations: tool.Annotations{}, RequestedBy: "model", Status: gate.Pending, CreatedAt: t0,
			AskReason: "it is not marked read-only, and destructiveHint defaults to true"},
		{ID: "a2", SessionID: "s1", MessageID: "m2", ToolCallID: "n1", ParentToolCallID: "call_2",
			ToolName: "write_file", Arguments: json.RawMessage(`{"path":"a.txt","content":"x"}`),
			EditedArguments: json.RawMessage(`{"path":"b.txt","content":"x"}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(false), DestructiveHint: tool.Bool(false),
				IdempotentHint: tool.Bool(false), OpenWorldHint: tool.Bool(false)},
			RequestedBy: "run_js", Status: gate.Approved, DecidedBy: "ana", Reason: "looks fine",
			Scope: gate.Session, CreatedAt: t0.Add(time.Millisecond), DecidedAt: &decided},
		{ID: "a3", SessionID: "s1", MessageID: "m5", ToolCallID: "call_3", ToolName: "fetch",
			Arguments: json.RawMessage(`{}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true), DestructiveHint: tool.Bool(true),
				IdempotentHint: tool.Bool(true), OpenWorldHint: tool.Bool(true)},
			RequestedBy: "model", Status: gate.Approved, Automatic: true, DecidedBy: "policy",
			Scope: gate.Once, CreatedAt: t0.Add(2 * time.Millisecond), DecidedAt: &decided},
		{ID: "a4", SessionID: "s2", MessageID: "m9", ToolCallID: "call_9", ToolName: "run_command",
			Arguments:   json.RawMessage(`{"command":"ls"}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(false), OpenWorldHint: tool.Bool(true)},
			RequestedBy: "model", Status: gate.Pending, CreatedAt: t0.Add(-time.Hour)},
		{ID: "a5", SessionID: "s1", MessageID: "m6", ToolCallID: "call_4", ToolName: "run_command",
			Annotations: tool.Annotations{DestructiveHint: tool.Bool(false)},
			RequestedBy: "model", Status: gate.Denied, Automatic: true, DecidedBy: "handler",
			Reason: "Tool execution was blocked", CreatedAt: t0.Add(3 * time.Millisecond), DecidedAt: &decided},
	}
}
