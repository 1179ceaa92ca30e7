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

// When the server does not ask its question again on a new tasks/result, it is no longer
// waiting for it: the answer is refused as expired with that reason, and the question closes
// saying so.
func TestLegacyQuestionTheServerNoLongerAsks(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	b.Receiver.Knobs().AskInputOnce(true)
	w1, passes := b.Watcher(t, "first", nil)
	id, key := openQuestion(t, b, "not-asked", passes)
	w1.Stop()
	b.Servers.Close()
	// The server asks each question once: a new tasks/result does not bring it back.
	ops2, _ := secondConsole(t, b, "second", 500*time.Millisecond)
	_, err := ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve)
	var gone *operations.InputExpiredError
	if !errors.As(err, &gone) || gone.Reason != operations.ReasonServerNotWaiting {
		t.Fatalf("answer to a question the server no longer asks: %v, want expired saying the server is not waiting", err)
	}
	d := b.Detail(t, id)
	if d.Inputs[0].State != "expired" {
		t.Fatalf("question %s, want expired", d.Inputs[0].State)
	}
	_, err = ops2.AnswerInput(context.Background(), acmeScope, id, key, "alice", approve)
	if !errors.As(err, &gone) || gone.Reason != operations.ReasonServerNotWaiting {
		t.Fatalf("a second answer: %v, want the same reason", err)
	}
}
