package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// arrivals records when each tasks/get reached the server.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(body, &m) == nil && m.Method == "tasks/get" {
				a.mu.Lock()
				a.at = append(a.at, time.Now())
				a.mu.Unlock()
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (a *arrivals) list() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...)
}

// TestRetryAfterHoldsTheConnsRequestsBack: a tasks/get answered 429 with Retry-After is a
// typed backpressure error; until the wait has passed no request leaves the Conn (a call whose
// context ends sooner fails at once as not delivered), and a call allowed to wait is sent only
// after it.
func TestRetryAfterHoldsTheConnsRequestsBack(t *testing.T) {
	t.Parallel()
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			arr := &arrivals{}
			rig := startReceiver(t, receiver.Config{}, arr.wrap)
			conn := rig.dial(t, mcpclient.Options{Era: eraChoice(era)})
			ctx := ctxT(t, 20*time.Second)
			task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rig.rcv.Knobs().ThrottleTasksGet(1, time.Time{}, 2*time.Second)
			before := time.Now()
			_, err = conn.GetTask(ctx, task.ID)
			until, ok := mcpclient.RetryAt(err)
			if !errorsIs(err, mcpclient.ErrBackpressure) || !errorsIs(err, mcpclient.ErrTransportLost) || !ok {
				t.Fatalf("throttled tasks/get: %v", err)
			}
			if until.Sub(before) < 2*time.Second || time.Until(until) > 2*time.Second {
				t.Fatalf("retry at %v, want 2s after the answer (asked at %v)", until, before)
			}
			sent := len(arr.list())
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err = conn.GetTask(short, task.ID)
			cancel()
			if !errorsIs(err, mcpclient.ErrBackpressure) || !errorsIs(err, mcpclient.ErrNotDelivered) || errorsIs(err, mcpclient.ErrTransportLost) {
				t.Fatalf("a read inside the wait with a short deadline: %v, want held back, not delivered", err)
			}
			if n := len(arr.list()); n != sent {
				t.Fatalf("%d tasks/get reached the server inside the Retry-After", n-sent)
			}
			if _, err := conn.GetTask(ctx, task.ID); err != nil {
				t.Fatalf("a read that may wait: %v", err)
			}
			got := arr.list()
			if len(got) != sent+1 || got[len(got)-1].Before(until) {
				t.Fatalf("the read after the wait reached the server at %v, Retry-After ended %v", got[len(got)-1], until)
			}
		})
	}
}

// TestRetryAfterIsBoundedByMaxRetryAfter: a server asking for an hour holds the Conn no longer
// than its MaxRetryAfter.
func TestRetryAfterIsBoundedByMaxRetryAfter(t *testing.T) {
	t.Parallel()
	rig := startReceiver(t, receiver.Config{})
	conn := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension, MaxRetryAfter: 200 * time.Millisecond})
	ctx := ctxT(t, 20*time.Second)
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rig.rcv.Knobs().ThrottleTasksGet(1, time.Time{}, time.Hour)
	_, err = conn.GetTask(ctx, task.ID)
	var bp *mcpclient.BackpressureError
	if !asAny(err, &bp) || bp.Status != http.StatusTooManyRequests || bp.RetryAfter != 200*time.Millisecond {
		t.Fatalf("throttled read: %v (%+v), want a 429 held for the 200ms bound", err, bp)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := conn.GetTask(wait, task.ID); err != nil {
		t.Fatalf("after the bounded wait: %v", err)
	}
}
