package watch_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/watch"
)

// TestAThrottledServerIsPolledNoSoonerThanItsRetryAfter: while the server answers tasks/get
// 429 with Retry-After: 1, the watcher's next status read of the task reaches the server no
// sooner than a second after each refusal, and the refusals do not make the task
// unobservable: once the server reads again the task is followed to completed.
func TestAThrottledServerIsPolledNoSoonerThanItsRetryAfter(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b, proxy := behindProxy(t, era)
			id := b.Start(t, "refund", "bp-1", `{"duration_ms": 1200}`).Response.OperationID
			b.Receiver.Knobs().ThrottleTasksGet(0, time.Now().Add(1500*time.Millisecond), time.Second)
			_, passes := b.Watcher(t, "r1", nil) // polls every 50ms, unobservable after 300ms of failed reads
			opstest.WaitFor(t, passes, 15*time.Second, "a final state", func() bool { return b.Detail(t, id).Task.State.Final() })
			if d := b.Detail(t, id); d.Task.State != operations.StateCompleted {
				t.Fatalf("state %s (reconciliation %+v): backpressure is not a failed read", d.Task.State, d.Reconciliation)
			}
			var refused []time.Time
			var gets []time.Time
			for _, m := range proxy.Messages() {
				switch {
				case m.Method != "tasks/get":
				case m.Dir == "response" && m.HTTPStatus == http.StatusTooManyRequests:
					refused = append(refused, m.At)
				case m.Dir == "request":
					gets = append(gets, m.At)
				}
			}
			if len(refused) == 0 || len(refused) > 2 {
				t.Fatalf("%d reads refused with 429 in a 1.5s throttle with Retry-After 1s, want 1 or 2", len(refused))
			}
			for _, r := range refused {
				for _, g := range gets {
					if g.After(r) && g.Before(r.Add(time.Second)) {
						t.Fatalf("a tasks/get reached the server %v after a 429 asking for 1s", g.Sub(r))
					}
				}
			}
			t.Logf("%d refused, %d status reads in all", len(refused), len(gets))
		})
	}
}

// TestARetryAfterIsWrittenAtTheNextFlush: a task's progress was just written, so its next
// write would wait ProgressEvery (here an hour); a Retry-After the server then sets is
// written at the next flush all the same, so a replica that takes the task over from a
// holder that died meanwhile does not poll before the server allows.
func TestARetryAfterIsWrittenAtTheNextFlush(t *testing.T) {
	t.Parallel()
	b, proxy := behindProxy(t, "extension")
	id := b.Start(t, "refund", "bp-retry-1", `{"outcome": "hang"}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.ProgressEvery = time.Hour })
	opstest.WaitFor(t, passes, 10*time.Second, "a first poll count written", func() bool { return b.Detail(t, id).Task.Polls > 0 })

	const after = 3 * time.Second
	b.Receiver.Knobs().ThrottleTasksGet(1, time.Time{}, after)
	var refused time.Time
	opstest.WaitFor(t, passes, 10*time.Second, "a tasks/get refused with 429", func() bool {
		for _, m := range proxy.Messages() {
			if m.Method == "tasks/get" && m.Dir == "response" && m.HTTPStatus == http.StatusTooManyRequests {
				refused = m.At
				return true
			}
		}
		return false
	})
	want := refused.Add(after - 50*time.Millisecond)
	opstest.WaitFor(t, passes, time.Second, "the server's retry time stored as the next poll", func() bool {
		next := b.Detail(t, id).Task.NextPollAt
		return next != nil && !next.Before(want)
	})
	t.Logf("refused at %s, next poll stored for %s", refused.Format(time.StampMilli), b.Detail(t, id).Task.NextPollAt.Format(time.StampMilli))
}
