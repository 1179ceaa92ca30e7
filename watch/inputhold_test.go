package watch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/watch"
)

var acmeScope = operations.Scope{Tenants: []string{"acme"}}

var approve = mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}}

// openQuestion starts a refund that asks for approval and waits until its question is stored.
func openQuestion(t *testing.T, b *opstest.Bundle, key string, passes <-chan int) (string, string) {
	t.Helper()
	id := b.Start(t, "refund", key, `{"outcome": "input", "input_message": "Approve the refund?", "text": "refund approved by a person"}`).Response.OperationID
	opstest.WaitFor(t, passes, 10*time.Second, "the question, held", func() bool {
		d := b.Detail(t, id)
		if d.Task.State != operations.StateInputRequired || len(d.Inputs) != 1 {
			return false
		}
		holder, _, err := b.Store.InputHolder(context.Background(), id, d.Inputs[0].Key)
		return err == nil && holder != ""
	})
	return id, b.Detail(t, id).Inputs[0].Key
}

// approvedWithTheAnswer waits until the task completed with the person's approval (the
// receiver completes with "Not approved: cancel" when its question was cut off).
func approvedWithTheAnswer(t *testing.T, b *opstest.Bundle, id string, passes <-chan int) {
	t.Helper()
	opstest.WaitFor(t, passes, 15*time.Second, "the outcome", func() bool {
		d := b.Detail(t, id)
		return d.Task.State.Final() && d.Envelope != nil
	})
	d := b.Detail(t, id)
	if d.Task.State != operations.StateCompleted || d.Envelope.ToolError || !strings.Contains(d.Envelope.Preview, "refund approved by a person") {
		t.Fatalf("task %s, envelope %+v: the person's answer did not reach the server", d.Task.State, d.Envelope)
	}
	if d.Inputs[0].State != "answered" || len(d.Inputs) != 1 {
		t.Fatalf("inputs %+v, want the one question answered", d.Inputs)
	}
}

// A question asked on the tasks/result stream waits as long as the workflow allows, past any
// 30 s handler timeout: an answer two minutes later reaches the server.
func TestLegacyQuestionAnsweredTwoMinutesLaterReachesTheServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits two minutes")
	}
	b := opstest.Setup(t, opstest.Options{})
	_, passes := b.Watcher(t, "r1", nil)
	id, key := openQuestion(t, b, "late-answer", passes)
	time.Sleep(2 * time.Minute)
	d := b.Detail(t, id)
	if d.Task.State != operations.StateInputRequired || d.Inputs[0].State != "open" {
		t.Fatalf("after two minutes: task %s, question %s; the server stopped waiting", d.Task.State, d.Inputs[0].State)
	}
	if _, err := b.Ops.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve); err != nil {
		t.Fatalf("answer two minutes later: %v", err)
	}
	approvedWithTheAnswer(t, b, id, passes)
}

// After a console restart (new connections, a new watcher on the same database) tasks/result
// is opened again, the server delivers its queued question again under the same key, and the
// person's answer to the stored question completes the task.
func TestLegacyQuestionAnsweredAfterARestart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stop", "crash"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{})
			w1, passes := b.Watcher(t, "before-"+how, func(c *watch.Config) {
				c.Heartbeat, c.HeartbeatTimeout = 100*time.Millisecond, 300*time.Millisecond
			})
			id, key := openQuestion(t, b, "restart-"+how, passes)
			if how == "crash" {
				w1.Crash()
			} else {
				w1.Stop()
			}
			b.Restart(t) // the old process's connections close with it
			_, passes = b.Watcher(t, "after-"+how, nil)
			// The new watcher opens tasks/result; the server asks again, under the same key.
			opstest.WaitFor(t, passes, 10*time.Second, "the question held again", func() bool {
				holder, alive, err := b.Store.InputHolder(context.Background(), id, key)
				return err == nil && holder == "after-"+how && alive
			})
			if n := len(b.Detail(t, id).Inputs); n != 1 {
				t.Fatalf("%d questions after the restart, want the stored one asked again", n)
			}
			if _, err := b.Ops.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve); err != nil {
				t.Fatalf("answer after the restart: %v", err)
			}
			approvedWithTheAnswer(t, b, id, passes)
		})
	}
}

// secondConsole is another console on the same database and receiver: its own connections,
// service and watcher replica.
func secondConsole(t *testing.T, b *opstest.Bundle, replica string, reopenWait time.Duration) (*operations.Service, <-chan int) {
	t.Helper()
	srv := operations.NewServers(operations.ServersConfig{Policy: b.Policy, BuiltinURL: b.BaseURL})
	t.Cleanup(srv.Close)
	ops, err := operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: srv, PollFloor: 20 * time.Millisecond,
		DefaultPoll: 50 * time.Millisecond, InputReopenWait: reopenWait})
	if err != nil {
		t.Fatal(err)
	}
	passes := make(chan int, 1)
	w, err := watch.New(watch.Config{Store: b.Store, Servers: srv, Policy: b.Policy, Operations: ops, ReplicaID: replica,
		Interval: 10 * time.Millisecond, PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond, Lease: 5 * time.Second,
		UnobservableGrace: 300 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		AfterPass: func(n int) {
			select {
			case passes <- n:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return ops, passes
}

// An answer given on a replica that does not hold the question is refused as held elsewhere
// only while the holding replica is alive; once it stopped, this replica opens tasks/result,
// the server asks again here and the answer reaches it.
func TestLegacyQuestionHeldByAnotherLiveReplica(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	w1, passes := b.Watcher(t, "holder", nil)
	id, key := openQuestion(t, b, "elsewhere", passes)
	ops2, passes2 := secondConsole(t, b, "other", 5*time.Second)
	_, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve)
	if !errors.Is(err, operations.ErrInputElsewhere) {
		t.Fatalf("answer on another replica while the holder lives: %v, want held elsewhere", err)
	}
	w1.Stop()
	b.Servers.Close()
	if _, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve); err != nil {
		t.Fatalf("answer on the other replica once the holder stopped: %v", err)
	}
	approvedWithTheAnswer(t, b, id, passes2)
}

// When the server does not ask its question again on a new tasks/result it is still waiting
// for it (its task is input_required): the answer is refused as held elsewhere and the
// question stays open, never closed as if the server had stopped waiting.
func TestLegacyQuestionNotAskedAgainStaysOpen(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	b.Receiver.Knobs().AskInputOnce(true)
	w1, passes := b.Watcher(t, "first", nil)
	id, key := openQuestion(t, b, "not-asked", passes)
	w1.Stop()
	b.Servers.Close()
	// The server asks each question once: a new tasks/result does not bring it back.
	ops2, _ := secondConsole(t, b, "second", 500*time.Millisecond)
	for range 2 {
		_, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve)
		if !errors.Is(err, operations.ErrInputElsewhere) || !strings.Contains(err.Error(), operations.NotAskedAgain) {
			t.Fatalf("answer to a question the server did not ask again: %v, want held elsewhere saying it was not asked again", err)
		}
		if d := b.Detail(t, id); d.Inputs[0].State != "open" || d.Task.State != operations.StateInputRequired {
			t.Fatalf("question %s, task %s: want the question still open while the server waits", d.Inputs[0].State, d.Task.State)
		}
	}
}

// A holder whose beats lapsed (a replica starved under load) while its tasks/result stream
// still holds the question: an answer on another replica does not close the question; once
// the holder's connection is gone, the other replica's fresh tasks/result brings the question
// back (its own wait, opened while the old stream was alive, never would) and the answer
// reaches the server.
func TestLegacyQuestionOfALapsedHolderStaysAnswerable(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	w1, passes := b.Watcher(t, "lapsed", func(c *watch.Config) {
		c.Heartbeat, c.HeartbeatTimeout = time.Hour, 3*time.Hour
	})
	id, key := openQuestion(t, b, "lapsed-holder", passes)
	// Its last beat is older than its own timeout, its process and connection live on.
	if _, err := b.Pool.Exec(context.Background(), `UPDATE watcher_replicas SET beat_at = now() - interval '4 hours' WHERE replica = 'lapsed'`); err != nil {
		t.Fatal(err)
	}
	opstest.WaitFor(t, passes, 5*time.Second, "the holder's beats lapsed", func() bool {
		_, alive, err := b.Store.InputHolder(context.Background(), id, key)
		return err == nil && !alive
	})
	ops2, passes2 := secondConsole(t, b, "other", 700*time.Millisecond)
	_, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve)
	if !errors.Is(err, operations.ErrInputElsewhere) {
		t.Fatalf("answer while the lapsed holder's stream holds the question: %v, want held elsewhere", err)
	}
	if d := b.Detail(t, id); d.Inputs[0].State != "open" {
		t.Fatalf("question %s after an answer the server could not take yet, want open", d.Inputs[0].State)
	}
	w1.Stop() // its tasks/result stream closes
	b.Servers.Close()
	var last error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, last = ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve); last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("answer once the lapsed holder's connection closed: %v", last)
	}
	approvedWithTheAnswer(t, b, id, passes2)
}

// A question closed unanswered that the server asks again is open again under the same key.
func TestLegacyQuestionAskedAgainReopens(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	w1, passes := b.Watcher(t, "first", nil)
	id, key := openQuestion(t, b, "asked-again", passes)
	// Closed unanswered, as a console closes a question whose deadline it saw pass.
	if _, err := b.Pool.Exec(context.Background(), `UPDATE pending_inputs SET state = 'expired' WHERE operation_id = $1 AND input_key = $2 AND state = 'open'`, id, key); err != nil {
		t.Fatal(err)
	}
	if d := b.Detail(t, id); d.Inputs[0].State != "expired" {
		t.Fatalf("question %s, want closed", d.Inputs[0].State)
	}
	w1.Stop()
	b.Servers.Close()
	ops2, passes2 := secondConsole(t, b, "second", 5*time.Second)
	opstest.WaitFor(t, passes2, 10*time.Second, "the question asked again and open", func() bool {
		d := b.Detail(t, id)
		return len(d.Inputs) == 1 && d.Inputs[0].State == "open"
	})
	if _, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve); err != nil {
		t.Fatalf("answer to the question asked again: %v", err)
	}
	approvedWithTheAnswer(t, b, id, passes2)
}
