package operations_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/operations"
)

// TestABeatIsOneRoundTripAndForgetsReplicasGoneForADay: every replica beats every second or
// so, all day, so a beat is one round trip; on the way it removes the rows of replicas that
// have not beaten for a day, never its own (a replica back after a day keeps beating) nor one
// that beat within the day.
func TestABeatIsOneRoundTripAndForgetsReplicasGoneForADay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, tracer := tracedPool(t)
	st := operations.NewStore(pool)
	for _, r := range []string{"gone", "back", "recent", "beating"} {
		if err := st.Beat(ctx, r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE watcher_replicas SET beat_at = now() - CASE replica
		WHEN 'gone' THEN interval '25 hours' WHEN 'back' THEN interval '26 hours' WHEN 'recent' THEN interval '23 hours' ELSE interval '0' END`); err != nil {
		t.Fatal(err)
	}
	sent, _ := tracer.count(func() {
		if err := st.Beat(ctx, "back", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	if len(sent) != 1 {
		t.Errorf("a beat made %d round trips, want 1:\n%s", len(sent), strings.Join(sent, "\n"))
	}
	rs, err := st.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		if r.Name == "back" && (!r.Alive || r.StaleAfter != 2*time.Minute) {
			t.Errorf("the replica back after a day: %+v, want alive with its new timeout", r)
		}
	}
	slices.Sort(names)
	if want := []string{"back", "beating", "recent"}; !slices.Equal(names, want) {
		t.Fatalf("replicas after the beat: %v, want %v (only the one gone for a day removed)", names, want)
	}
}
