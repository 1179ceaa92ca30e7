package mcpclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// A 2025-11-25 question is held for as long as the request it came on allows: when that wait
// ends, no answer is sent, so the server keeps the question and delivers it again on the next
// tasks/result, under the same key; the answer then reaches the server.
func TestLegacyQuestionIsHeldAndAskedAgainUnderTheSameKey(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 90*time.Second) // longer than the input wait below, which then bounds the hold
	rig := startReceiver(t, receiver.Config{})
	inputs := make(chan mcpclient.InputRequest, 4)
	conn := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy, OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input", "text": "approved by alice"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { _, err := conn.AwaitOutcome(first, task.ID); ended <- err }()
	r1 := <-inputs
	stop()
	<-ended
	time.Sleep(200 * time.Millisecond) // an error answer, if one were sent, would have ended the task
	if snap, err := conn.GetTask(ctx, task.ID); err != nil || snap.Task.Status != mcpclient.StatusInputRequired {
		t.Fatalf("after the wait ended: %+v %v; the server should still be waiting", snap.Task, err)
	}
	if got := conn.PendingInput(task.ID); len(got) != 0 {
		t.Fatalf("still pending after its hold ended: %+v", got)
	}
	results := make(chan outcomeOrErr, 1)
	second := mcpclient.WithInputWait(ctx, time.Minute)
	go func() { o, err := conn.AwaitOutcome(second, task.ID); results <- outcomeOrErr{o, err} }()
	r2 := <-inputs
	if r2.Key != r1.Key || r2.Message != r1.Message {
		t.Fatalf("asked again as %q (%q), first as %q (%q): want the same key", r2.Key, r2.Message, r1.Key, r1.Message)
	}
	if left := time.Until(r2.ExpiresAt); left < 50*time.Second || left > time.Minute {
		t.Fatalf("the question held for %v, want the minute of WithInputWait", left)
	}
	if err := conn.AnswerInput(ctx, task.ID, r2.Key, accept(map[string]any{"approve": true})); err != nil {
		t.Fatal(err)
	}
	res := <-results
	if res.err != nil || res.o.ToolError || len(res.o.Result.Texts()) == 0 || res.o.Result.Texts()[0] != "approved by alice" {
		t.Fatalf("outcome %+v %v", res.o, res.err)
	}
}

// At the end of its input wait a held question is answered "no answer in time" and can no
// longer be answered through the connection.
func TestLegacyQuestionExpiresAtItsInputWait(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	rig := startReceiver(t, receiver.Config{})
	inputs := make(chan mcpclient.InputRequest, 4)
	conn := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy, OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan outcomeOrErr, 1)
	go func() {
		o, err := conn.AwaitOutcome(mcpclient.WithInputWait(ctx, 300*time.Millisecond), task.ID)
		results <- outcomeOrErr{o, err}
	}()
	r := <-inputs
	res := <-results
	if res.err != nil || !res.o.ToolError || !strings.Contains(res.o.Result.Texts()[0], "Not approved") {
		t.Fatalf("outcome after the input wait %+v %v, want the server's own ending without an answer", res.o, res.err)
	}
	if err := conn.AnswerInput(ctx, task.ID, r.Key, accept(map[string]any{"approve": true})); !errors.Is(err, mcpclient.ErrUnknownInput) {
		t.Fatalf("answer after the input wait: %v, want unknown input", err)
	}
}
