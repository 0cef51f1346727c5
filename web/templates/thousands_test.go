package templates

import "testing"

func TestThousandsPutsACommaBetweenGroupsOfThreeDigits(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345",
		1000000: "1,000,000", -1234: "-1,234", -999: "-999"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
