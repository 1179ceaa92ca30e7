package mcpclient

import "testing"

// TestStaleNotificationsAndAnswers: a notification contradicting a terminal status learned
// from an answer or a seed is dropped as stale; one contradicting a terminal status an
// earlier notification carried is a violation; an answer is stale only when its request was
// sent before the terminal status was learned.
func TestStaleNotificationsAndAnswers(t *testing.T) {
	var s statusTracker
	sent := s.sent()
	if v, stale := s.answer("a", StatusWorking, sent); v != nil || stale {
		t.Fatalf("first answer: %v %v", v, stale)
	}
	early := s.sent()
	if v, stale := s.answer("a", StatusCompleted, s.sent()); v != nil || stale {
		t.Fatalf("completed: %v %v", v, stale)
	}
	if v, stale := s.answer("a", StatusWorking, early); v != nil || !stale {
		t.Fatalf("working answered to a read sent before completed: %v stale=%v, want stale", v, stale)
	}
	if v, stale := s.answer("a", StatusCompleted, early); v != nil || stale {
		t.Fatalf("the same terminal status, sent early: %v stale=%v", v, stale)
	}
	if v, stale := s.notified("a", StatusWorking); v != nil || !stale {
		t.Fatalf("a working notification after a completed answer: %v stale=%v, want stale", v, stale)
	}
	if v, stale := s.answer("a", StatusWorking, s.sent()); v == nil || stale || v.From != StatusCompleted {
		t.Fatalf("working answered to a read sent after completed: %v stale=%v, want a violation", v, stale)
	}
	if s.last["a"] != StatusCompleted {
		t.Fatalf("last = %s, terminal is final", s.last["a"])
	}

	s.notified("b", StatusWorking)
	s.notified("b", StatusFailed)
	if v, stale := s.notified("b", StatusWorking); v == nil || stale {
		t.Fatalf("a working notification after a failed one: %v stale=%v, want a violation", v, stale)
	}

	s.seed("c", StatusCancelled)
	if v, stale := s.notified("c", StatusWorking); v != nil || !stale {
		t.Fatalf("a working notification after a seeded cancelled: %v stale=%v, want stale", v, stale)
	}
	if v, stale := s.answer("c", StatusWorking, s.sent()); v == nil || stale {
		t.Fatalf("a working answer to a read sent after the seed: %v stale=%v, want a violation", v, stale)
	}
	if n := s.staleCount(); n != 3 {
		t.Fatalf("stale count %d, want 3", n)
	}
}
