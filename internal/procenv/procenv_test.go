package procenv

import (
	"reflect"
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
