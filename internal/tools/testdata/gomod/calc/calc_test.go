package calc

import "testing"

func TestAdd(t *testing.T) {
	if got, want := Add(2, 3), 5; got != want {
		t.Errorf("Add(2, 3) = %d, want %d", got, want)
	}
}

func TestSub(t *testing.T) {
	if got, want := Sub(5, 3), 2; got != want {
		t.Errorf("Sub(5, 3) = %d, want %d", got, want)
	}
}
