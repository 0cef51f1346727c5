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
	"countersign/internal/store/fixture"
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
	{"AgentSessionsAndOutsideCalls", testAgentSessionsAndOutsideCalls},
	{"DecidedOutsideCallsInOneTransaction", testDecidedOutsideCallsInOneTransaction},
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
	{"ARemovedReceiversLinksDie", testARemovedReceiversLinksDie},
	{"ALinksTokenIsNotDerivedFromTheWebhookSecret", testALinksTokenIsNotDerivedFromTheWebhookSecret},
	{"ACallIsAnnouncedOnlyToItsReviewers", testACallIsAnnouncedOnlyToItsReviewers},
	{"TheOutboxIsWorkedThrough", testTheOutboxIsWorkedThrough},
	{"OutboxRowsAreClaimedByOneWorkerAtATime", testOutboxRowsAreClaimedByOneWorkerAtATime},
	{"AnExpiredClaimIsClaimableAgain", testAnExpiredClaimIsClaimableAgain},
	{"InboxListsPendingApprovalsAcrossSessionsOldestFirst", testInboxListsPendingApprovalsAcrossSessionsOldestFirst},
	{"InboxForAPersonKeepsWhatTheyMayDecide", testInboxForAPersonKeepsWhatTheyMayDecide},
	{"VotesRoundTrip", testVotesRoundTrip},
	{"OneVotePerPerson", testOneVotePerPerson},
	{"LookAlikeNamesVoteOnce", testLookAlikeNamesVoteOnce},
	{"VotesRacingMakeTheQuorumOnce", testVotesRacingMakeTheQuorumOnce},
	{"RuleAndShareKeepTheirPeople", testRuleAndShareKeepTheirPeople},
	{"ConnectionsAreStoredListedRevokedAndTouched", testConnectionsAreStoredListedRevokedAndTouched},
	{"ConnectionsSurviveAReopen", testConnectionsSurviveAReopen},
	{"ConnectionRevokesRacingKeepOneTime", testConnectionRevokesRacingKeepOneTime},
	{"AAPRequestsInstancesAndEvents", testAAPRequestsInstancesAndEvents},
	{"FailedTokensAreCountedInTheDatabase", testFailedTokensAreCountedInTheDatabase},
}

// t0 is the tests' epoch: nanoseconds set, so a lossy time round trip shows.
var t0 = fixture.T0

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

func session(id string, at time.Time) agent.Session { return fixture.Session(id, at) }

func mustCreateApprovals(t *testing.T, db store.Backend, as ...gate.Approval) {
	t.Helper()
	for _, a := range as {
		if err := db.CreateApproval(context.Background(), a); err != nil {
			t.Fatalf("CreateApproval(%s): %v", a.ID, err)
		}
	}
}

// transcript, approvals: the shared fixture (internal/store/fixture).
func transcript() []agent.Message { return fixture.Transcript() }

func approvals() []gate.Approval { return fixture.Approvals() }
