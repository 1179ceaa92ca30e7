package watch_test

import (
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// TestAFastPolledTasksProgressIsWrittenEveryProgressEvery: a task polled every 50 ms, with a
// flush every 50 ms, has its poll count written no more often than every ProgressEvery (each
// write carrying the polls since the last), and the stop writes the rest.
func TestAFastPolledTasksProgressIsWrittenEveryProgressEvery(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 50 * time.Millisecond}})
	id := b.Start(t, "refund", "progress-1", `{"outcome": "hang"}`).Response.OperationID
	const every = 600 * time.Millisecond
	w, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.ProgressEvery = every })
	opstest.WaitFor(t, passes, 10*time.Second, "a first poll count written", func() bool { return b.Detail(t, id).Task.Polls > 0 })

	// A write happened after the start of the last sample that did not see it and before the
	// end of the first that did: under load a sample can take far longer than the 10 ms between
	// samples, so two writes are at most (end of the sample that saw the second) − (start of the
	// sample before the one that saw the first) apart, and that must reach every.
	type change struct {
		before, seen time.Time // the start of the sample before, the end of the sample that saw it
		polls        int
	}
	start := time.Now()
	changes := []change{{start, start, b.Detail(t, id).Task.Polls}}
	prev := start
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		at := time.Now()
		if p := b.Detail(t, id).Task.Polls; p != changes[len(changes)-1].polls {
			changes = append(changes, change{prev, time.Now(), p})
		}
		prev = at
	}
	if len(changes) < 4 {
		t.Fatalf("the poll count was written %d times in 3 s, want every %v: %v", len(changes)-1, every, changes)
	}
	for i := 2; i < len(changes); i++ { // the first change is timed from the sampling's start
		most, added := changes[i].seen.Sub(changes[i-1].before), changes[i].polls-changes[i-1].polls
		if most < every {
			t.Fatalf("writes at most %v apart (%d and %d polls), want at least %v", most, changes[i-1].polls, changes[i].polls, every)
		}
		// Polled every 50 ms for at least 600 ms: each write carries several polls.
		if added < 5 {
			t.Fatalf("a write added %d polls after at most %v, want the polls since the last write", added, most)
		}
	}
	last := changes[len(changes)-1].polls
	w.Stop()
	if got := b.Detail(t, id).Task.Polls; got <= last {
		t.Fatalf("after the stop the count is %d, was %d: the polls since the last write were not written", got, last)
	}
	t.Logf("%d writes in 3 s, the count reaching %d", len(changes)-1, last)
}
