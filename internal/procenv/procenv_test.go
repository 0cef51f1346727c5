package procenv

import (
	"reflect"
	"strings"
	"testing"
)

func TestFilterKeepsTheAllowlistAndThePassedNamesOnly(t *testing.T) {
	env := []string{
		"PATH=/usr/bin", "HOME=/home/u", "COUNTERSIGN_TOKEN=owner-secret", "OPENAI_API_KEY=sk-1",
		"LC_ALL=C.UTF-8", "LANG=C", "TMPDIR=/tmp/x", "GOPROXY=off", "LCX=no", "USER=u", "odd",
	}
	got := Filter(env, []string{"GOPROXY"})
	want := []string{"PATH=/usr/bin", "HOME=/home/u", "LC_ALL=C.UTF-8", "LANG=C", "TMPDIR=/tmp/x", "GOPROXY=off", "USER=u"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Filter = %q, want %q", got, want)
	}
	if got := Filter(env, nil); len(got) != len(want)-1 {
		t.Errorf("Filter without -pass-env = %q, want GOPROXY dropped too", got)
	}
}

func TestParseNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"GOPROXY", []string{"GOPROXY"}},
		{" GOPROXY , GOFLAGS,,_X1 ", []string{"GOPROXY", "GOFLAGS", "_X1"}},
	} {
		got, err := ParseNames(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseNames(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"A=B", "1A", "A B", "É"} {
		if _, err := ParseNames(bad); err == nil {
			t.Errorf("ParseNames(%q) accepted a bad name", bad)
		}
	}
}

func TestACallsEntryParsesBackWhateverItsIdsHold(t *testing.T) {
	for _, c := range []Call{
		{Store: "sqlite:/home/u/data/cs.db", SessionID: "k3x9", ToolCallID: "c1"},
		{Store: "sqlite:/a b/c%20d\nx.db", SessionID: "s 1", ToolCallID: "call_1/2"},
		{Store: "postgres:7715576550223431664/16384", SessionID: "", ToolCallID: "toolu_01\x00=é"},
	} {
		entry := c.Entry()
		name, value, _ := strings.Cut(entry, "=")
		if name != CallVar || strings.ContainsAny(value, "\x00\n") || strings.Count(value, " ") != 2 {
			t.Errorf("Entry() = %q: want COUNTERSIGN_CALL= and three fields without NUL or newline", entry)
		}
		if got, ok := ParseCall(value); !ok || got != c {
			t.Errorf("ParseCall(%q) = %+v, %v; want %+v", value, got, ok, c)
		}
	}
	for _, bad := range []string{"", "a b", "a b c d", "a b %zz"} {
		if _, ok := ParseCall(bad); ok {
			t.Errorf("ParseCall(%q) accepted it", bad)
		}
	}
}

func TestWithinIsTheCallAndTheCallsNestedInIt(t *testing.T) {
	c1 := Call{Store: "sqlite:/x.db", SessionID: "s", ToolCallID: "c1"}
	for _, tc := range []struct {
		c    Call
		want bool
	}{
		{c1, true},
		{Call{"sqlite:/x.db", "s", "c1/2"}, true},
		{Call{"sqlite:/x.db", "s", "c1/2/1"}, true},
		{Call{"sqlite:/x.db", "s", "c10"}, false},
		{Call{"sqlite:/x.db", "s", "c"}, false},
		{Call{"sqlite:/x.db", "t", "c1"}, false},
		{Call{"sqlite:/y.db", "s", "c1"}, false},
	} {
		if got := tc.c.Within(c1); got != tc.want {
			t.Errorf("%+v.Within(%+v) = %v, want %v", tc.c, c1, got, tc.want)
		}
	}
}

func TestWithCallLeavesOneMarkerLast(t *testing.T) {
	c := Call{Store: "sqlite:/x.db", SessionID: "s", ToolCallID: "c1"}
	env := []string{"PATH=/bin", "COUNTERSIGN_CALL=forged s c1", "HOME=/h", "COUNTERSIGN_CALL=outer s c0"}
	got := WithCall(env, c)
	want := []string{"PATH=/bin", "HOME=/h", "COUNTERSIGN_CALL=sqlite:%2Fx.db s c1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithCall = %q, want %q", got, want)
	}
	if env[1] != "COUNTERSIGN_CALL=forged s c1" {
		t.Errorf("WithCall changed its argument: %q", env)
	}
}
