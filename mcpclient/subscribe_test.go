package mcpclient_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// subscriber collects what a Subscribe stream delivers through Options.
type subscriber struct {
	acks  chan mcpclient.Subscription
	snaps chan mcpclient.Snapshot
}

func newSubscriber() *subscriber {
	return &subscriber{acks: make(chan mcpclient.Subscription, 16), snaps: make(chan mcpclient.Snapshot, 256)}
}

// options wires the collector into dial options; the callbacks never block.
func (s *subscriber) options() mcpclient.Options {
	return mcpclient.Options{
		OnInput: func(mcpclient.InputRequest) {}, // declares elicitation
		OnSubscribed: func(sub mcpclient.Subscription) {
			select {
			case s.acks <- sub:
			default:
			}
		},
		OnStatus: func(snap mcpclient.Snapshot) {
			select {
			case s.snaps <- snap:
			default:
			}
		},
	}
}

// ack waits for the acknowledgement of a subscription.
func (s *subscriber) ack(tb testing.TB, ctx context.Context) mcpclient.Subscription {
	tb.Helper()
	select {
	case a := <-s.acks:
		return a
	case <-ctx.Done():
		tb.Fatal("no notifications/subscriptions/acknowledged")
	}
	return mcpclient.Subscription{}
}

// until waits for a notified snapshot of task in status, and returns it
// with the statuses notified before it.
func (s *subscriber) until(tb testing.TB, ctx context.Context, task string, status mcpclient.Status) (mcpclient.Snapshot, []mcpclient.Status) {
	tb.Helper()
	var seen []mcpclient.Status
	for {
		select {
		case snap := <-s.snaps:
			if snap.Task.ID != task {
				tb.Errorf("notification for task %s on a subscription to %s", snap.Task.ID, task)
				continue
			}
			if snap.Violation != nil {
				tb.Errorf("notified snapshot breaks the state machine: %v", snap.Violation)
			}
			if snap.Task.Status == status {
				return snap, seen
			}
			seen = append(seen, snap.Task.Status)
		case <-ctx.Done():
			tb.Fatalf("task %s: no notifications/tasks with status %s (saw %v)", task, status, seen)
		}
	}
}

// subscribeInBackground runs Subscribe until ctx ends and returns its error.
func subscribeInBackground(ctx context.Context, conn mcpclient.Conn, ids ...string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- mcpclient.Subscribe(ctx, conn, ids) }()
	return done
}

// TestSubscribeDeliversDetailedTasks: against the reference receiver in
// extension mode, over HTTP and stdio, subscriptions/listen acknowledges the
// caller's task ids only, then notifications/tasks carry each DetailedTask to
// OnStatus as the task moves: working → completed with the inlined result,
// and input_required with its inputRequests, answerable from the
// notification alone (no poll in between).
func TestSubscribeDeliversDetailedTasks(t *testing.T) {
	t.Parallel()
	for _, via := range []peerTransport{overHTTP, overStdio} {
		t.Run(string(via), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			sub := newSubscriber()
			var conn mcpclient.Conn
			if via == overHTTP {
				conn = startReceiver(t, receiver.Config{Eras: receiver.ErasExtension}).dial(t, sub.options())
			} else {
				conn = dialStdio(t, sub.options(), "extension", "")
			}
			if conn.Info().Era != mcpclient.EraExtension {
				t.Fatalf("era %s", conn.Info().Era)
			}

			// working → completed.
			task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 1500, "text": "listened"}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			lctx, stop := context.WithCancel(ctx)
			defer stop()
			done := subscribeInBackground(lctx, conn, task.ID, "task_not_mine")
			if a := sub.ack(t, ctx); !slices.Equal(a.TaskIDs, []string{task.ID}) || a.ID == "" {
				t.Fatalf("acknowledged %+v, want only %s with a subscription id", a, task.ID)
			}
			first, _ := sub.until(t, ctx, task.ID, mcpclient.StatusWorking)
			if first.Outcome != nil || first.Task.PollInterval != rigPoll {
				t.Errorf("working notification %+v", first)
			}
			last, seen := sub.until(t, ctx, task.ID, mcpclient.StatusCompleted)
			if len(seen) != 0 {
				t.Errorf("between working and completed: %v", seen)
			}
			if o := last.Outcome; o == nil || o.Status != mcpclient.StatusCompleted || o.Era != mcpclient.EraExtension || o.ToolError ||
				o.Result == nil || len(o.Result.Texts()) != 1 || o.Result.Texts()[0] != "listened" {
				t.Fatalf("completed notification outcome %+v", last.Outcome)
			}
			stop()
			if err := <-done; err != nil {
				t.Errorf("Subscribe after its context ended: %v", err)
			}

			// input_required with inputRequests, then completed.
			task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input", "input_message": "Approve by notification?"}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatalf("create input task: %v", err)
			}
			lctx, stop = context.WithCancel(ctx)
			defer stop()
			done = subscribeInBackground(lctx, conn, task.ID)
			if a := sub.ack(t, ctx); !slices.Equal(a.TaskIDs, []string{task.ID}) {
				t.Fatalf("acknowledged %+v", a)
			}
			in, _ := sub.until(t, ctx, task.ID, mcpclient.StatusInputRequired)
			if len(in.InputRequests) != 1 || in.InputRequests[0].Method != "elicitation/create" ||
				in.InputRequests[0].Message != "Approve by notification?" || in.InputRequests[0].TaskID != task.ID {
				t.Fatalf("input_required notification requests %+v", in.InputRequests)
			}
			if err := conn.AnswerInput(ctx, task.ID, in.InputRequests[0].Key, accept(map[string]any{"approve": true})); err != nil {
				t.Fatalf("answer the notified input request: %v", err)
			}
			last, _ = sub.until(t, ctx, task.ID, mcpclient.StatusCompleted)
			if o := last.Outcome; o == nil || o.Result == nil || o.Result.Texts()[0] != receiver.ToolWorkOptional+" approved and done" {
				t.Fatalf("completed after input: %+v", last.Outcome)
			}
			stop()
			if err := <-done; err != nil {
				t.Errorf("Subscribe after its context ended: %v", err)
			}
		})
	}
}

// dropListenAfterAck cuts every subscriptions/listen response stream right
// after its acknowledgement: later events are discarded, the listen is ended
// and the connection aborted, so the client never reads a response.
func dropListenAfterAck(cut chan<- struct{}) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Mcp-Method") != "subscriptions/listen" {
				next.ServeHTTP(w, r)
				return
			}
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			cw := &cutWriter{ResponseWriter: w, cancel: cancel}
			next.ServeHTTP(cw, r.WithContext(ctx))
			select {
			case cut <- struct{}{}:
			default:
			}
			panic(http.ErrAbortHandler)
		})
	}
}

// cutWriter passes writes through until the acknowledgement went out.
type cutWriter struct {
	http.ResponseWriter
	cancel context.CancelFunc
	cut    atomic.Bool
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return len(p), nil
	}
	n, err := c.ResponseWriter.Write(p)
	if bytes.Contains(p, []byte("notifications/subscriptions/acknowledged")) {
		c.Flush()
		c.cut.Store(true)
		c.cancel()
	}
	return n, err
}

func (c *cutWriter) Flush() {
	if !c.cut.Load() {
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// TestSubscribeDropLeavesPollingAuthoritative: the subscription stream dies
// after its acknowledgement; Subscribe reports the lost transport (not
// "unsupported"), no notification tells of the end, and polling alone still
// reaches the terminal state.
func TestSubscribeDropLeavesPollingAuthoritative(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	cut := make(chan struct{}, 1)
	rig := startReceiver(t, receiver.Config{Eras: receiver.ErasExtension}, dropListenAfterAck(cut))
	sub := newSubscriber()
	conn := rig.dial(t, sub.options())
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 300, "text": "polled"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	err = mcpclient.Subscribe(ctx, conn, []string{task.ID})
	if !errorsIs(err, mcpclient.ErrTransportLost) || errorsIs(err, mcpclient.ErrNotSupported) {
		t.Fatalf("Subscribe over a dropped stream: %v", err)
	}
	select {
	case <-cut:
	default:
		t.Fatal("the listen stream was not cut")
	}
	if a := sub.ack(t, ctx); !slices.Equal(a.TaskIDs, []string{task.ID}) {
		t.Fatalf("acknowledged %+v", a)
	}
	out, err := conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusCompleted || out.Result == nil || out.Result.Texts()[0] != "polled" {
		t.Fatalf("polled outcome %+v %v", out, err)
	}
	snap, err := conn.GetTask(ctx, task.ID)
	if err != nil || snap.Task.Status != mcpclient.StatusCompleted || snap.Outcome == nil {
		t.Fatalf("GetTask after the drop: %+v %v", snap, err)
	}
	for {
		select {
		case s := <-sub.snaps:
			if s.Task.Status.Terminal() {
				t.Fatalf("a terminal notification arrived over a cut stream: %+v", s.Task)
			}
			continue
		default:
		}
		break
	}
}

// TestSubscribeOnLegacyIsNotSupported: a 2025-11-25 connection has no
// subscriptions/listen.
func TestSubscribeOnLegacyIsNotSupported(t *testing.T) {
	t.Parallel()
	conn := startReceiver(t, receiver.Config{}).dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy})
	if err := mcpclient.Subscribe(ctxT(t, 10*time.Second), conn, []string{"task_x"}); !errorsIs(err, mcpclient.ErrNotSupported) {
		t.Fatalf("Subscribe on legacy: %v", err)
	}
}
