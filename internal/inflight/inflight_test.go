package inflight

import "testing"

func TestBoundReservesAndEntersWithinItsLimits(t *testing.T) {
	b := &Bound{Total: 3, PerKey: 2}
	if got := b.Reserve(5); got != 3 {
		t.Fatalf("Reserve(5) of 3 free = %d", got)
	}
	if got := b.Reserve(1); got != 0 {
		t.Fatalf("Reserve(1) with none free = %d", got)
	}
	b.Release(1)
	if got := b.Reserve(4); got != 1 {
		t.Fatalf("Reserve(4) after one was released = %d", got)
	}
	for i, want := range []bool{true, true, false} {
		if got := b.Enter("a"); got != want {
			t.Fatalf("entering key a for the %d. time: %v, want %v (PerKey 2)", i+1, got, want)
		}
	}
	for _, key := range []string{"b", "", ""} {
		if !b.Enter(key) {
			t.Fatalf("key %q was held back by a full key", key)
		}
	}
	b.Leave("a")
	if !b.Enter("a") {
		t.Fatal("a key that left a slot could not enter again")
	}
	b.Leave("")
	if b.Enter("a") {
		t.Fatal("leaving the empty key freed a slot of another key")
	}
}
