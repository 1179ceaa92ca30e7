package mcpclient_test

import (
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// TestAResultNamingAnotherTaskIsNotTheOutcome: a 2025-11-25 tasks/result answer whose
// related-task _meta names another task is refused as a typed error, never returned as the
// asked task's outcome; the untouched answer is read the next time.
func TestAResultNamingAnotherTaskIsNotTheOutcome(t *testing.T) {
	t.Parallel()
	rig := startReceiver(t, receiver.Config{})
	p, err := faultproxy.New(rig.url)
	if err != nil {
		t.Fatal(err)
	}
	u, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	conn, err := mcpclient.Dial(ctxT(t, 20*time.Second), mcpclient.Options{URL: u, Token: "tok-a", Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := ctxT(t, 20*time.Second)
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 10}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rule := p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/result", Rewrite: faultproxy.SetRelatedTask("task-of-someone-else")})
	out, err := conn.AwaitOutcome(ctx, task.ID)
	var rte *mcpclient.RelatedTaskError
	if !asAny(err, &rte) || !errorsIs(err, mcpclient.ErrMalformed) || rte.Named != "task-of-someone-else" || p.Fired(rule) != 1 {
		t.Fatalf("tampered result: %+v, %v (rewrites %d)", out, err, p.Fired(rule))
	}
	if out, err := conn.AwaitOutcome(ctx, task.ID); err != nil || out.Status != mcpclient.StatusCompleted {
		t.Fatalf("untouched result: %+v, %v", out, err)
	}
}
