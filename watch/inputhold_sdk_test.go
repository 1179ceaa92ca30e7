package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// sdkQuestion runs a question of the TypeScript SDK task server (queued with the task,
// delivered on tasks/result) answered after wait.
func sdkQuestion(t *testing.T, wait time.Duration) {
	b, _ := sdkSetup(t)
	_, passes := b.Watcher(t, "r1", nil)
	id := b.Start(t, "refund", "sdk-question", `{"outcome": "input", "input_message": "Approve the refund?", "text": "refund approved by a person"}`).Response.OperationID
	opstest.WaitFor(t, passes, 10*time.Second, "the question", func() bool {
		d := b.Detail(t, id)
		return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
	})
	time.Sleep(wait)
	d := b.Detail(t, id)
	if d.Task.State != operations.StateInputRequired || d.Inputs[0].State != "open" {
		t.Fatalf("after %v: task %s, question %s", wait, d.Task.State, d.Inputs[0].State)
	}
	if _, err := b.Ops.AnswerInput(context.Background(), acmeScope, id, d.Inputs[0].Key, "alice", approve); err != nil {
		t.Fatalf("answer after %v: %v", wait, err)
	}
	approvedWithTheAnswer(t, b, id, passes)
}

// The TypeScript SDK's queued elicitation/create reaches the person and the answer the server.
func TestSDKTaskServerQuestionAnswered(t *testing.T) {
	t.Parallel()
	sdkQuestion(t, 0)
}

// The TypeScript SDK's question waits as long as the server waits: an answer two minutes
// later reaches it.
func TestSDKTaskServerQuestionAnsweredTwoMinutesLater(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits two minutes")
	}
	sdkQuestion(t, 2*time.Minute)
}
