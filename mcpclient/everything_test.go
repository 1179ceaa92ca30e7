package mcpclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/mcpclient"
)

// Peer: @modelcontextprotocol/server-everything@2026.8.31 (TypeScript SDK
// 1.x) over Streamable HTTP, installed from interop/package-lock.json with
// npm ci. What it does differently from the 2025-11-25 spec, tolerated here:
//   - it replaces the requested task ttl with its own;
//   - it answers tasks/result on a cancelled task with -32603;
//   - it returns a plain call to a task-required tool as an isError result
//     (spec: -32601) — the client refuses such a call before sending it;
//   - it answers an unknown or forgotten Mcp-Session-Id with HTTP 400 and
//     -32000 "No valid session ID provided" instead of 404 (mapped to
//     ErrSessionGone);
//   - it answers server/discover without a session with the same 400/-32000,
//     which era detection reads as legacy;
//   - its task store binds tasks to the session that created them;
//   - it delivers the input_required elicitation only on the tasks/result
//     stream, with the related-task _meta;
//   - it listens on every interface unless interop/loopback.cjs is preloaded.

// startEverything runs server-everything on 127.0.0.1 and returns its URL.
// It skips when node is absent, except under CI=true where it fails.
func startEverything(tb testing.TB) string {
	tb.Helper()
	return mcptest.StartEverything(tb)
}

// waitStatus polls tasks/get until the task reaches want.
func waitStatus(tb testing.TB, ctx context.Context, conn mcpclient.Conn, id string, want mcpclient.Status) mcpclient.Snapshot {
	tb.Helper()
	for attempt := 0; ; attempt++ {
		s, err := conn.GetTask(ctx, id)
		if err != nil {
			tb.Fatalf("poll %s: %v", id, err)
		}
		if s.Violation != nil {
			tb.Errorf("state machine violation: %v", s.Violation)
		}
		if s.Task.Status == want {
			return s
		}
		if s.Task.Status.Terminal() {
			tb.Fatalf("task %s ended %s while waiting for %s", id, s.Task.Status, want)
		}
		d := s.Task.PollInterval
		if d <= 0 || d > 500*time.Millisecond {
			d = 100 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			tb.Fatalf("task %s never reached %s", id, want)
		}
	}
}

func TestEverythingInputRequiredFlow(t *testing.T) {
	t.Parallel()
	url := startEverything(t)
	ctx := ctxT(t, 60*time.Second)
	inputs := make(chan mcpclient.InputRequest, 4)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: url, OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info := conn.Info()
	if info.Era != mcpclient.EraLegacy || info.ProtocolVersion != "2025-11-25" || !info.Capabilities.TasksToolsCall || info.SessionID == "" {
		t.Fatalf("info %+v", info)
	}
	if info.Evidence.HTTPStatus != 400 || info.Evidence.Era != mcpclient.EraLegacy {
		t.Errorf("evidence %+v", info.Evidence)
	}
	var research mcpclient.Tool
	for _, tl := range conn.Tools() {
		if tl.Name == "simulate-research-query" {
			research = tl
		}
	}
	if research.TaskSupport != mcpclient.TaskRequired {
		t.Fatalf("simulate-research-query taskSupport %q", research.TaskSupport)
	}
	if _, err := conn.CallTool(ctx, research.Name, map[string]any{"topic": "x"}, mcpclient.CallOptions{}); !errorsIs(err, mcpclient.ErrToolRequiresTask) {
		t.Errorf("plain call: %v", err)
	}

	task, err := conn.CreateTask(ctx, research.Name, map[string]any{"topic": "jaguar", "ambiguous": true}, mcpclient.TaskOptions{TTL: 1234 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The granted ttl is whatever the server says (it replaces ours).
	t.Logf("requested ttl 1.234s, granted %v", task.TTL)
	waitStatus(t, ctx, conn, task.ID, mcpclient.StatusInputRequired)

	outcome := make(chan mcpclient.Outcome, 1)
	errs := make(chan error, 1)
	go func() {
		o, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil {
			errs <- err
			return
		}
		outcome <- o
	}()
	var req mcpclient.InputRequest
	select {
	case req = <-inputs:
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no elicitation on the tasks/result stream")
	}
	if req.TaskID != task.ID || req.Mode != mcpclient.InputForm || len(req.RequestedSchema) != 1 || req.RequestedSchema[0].Name != "interpretation" {
		t.Fatalf("input request %+v", req)
	}
	if err := conn.AnswerInput(ctx, task.ID, req.Key, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"interpretation": "the animal"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-outcome:
		if o.Status != mcpclient.StatusCompleted || o.ToolError || !strings.Contains(strings.Join(o.Result.Texts(), ""), "the animal") {
			t.Fatalf("outcome %+v", o)
		}
	case err := <-errs:
		t.Fatal(err)
	}
}

func TestEverythingCancelResumeAndForgottenSession(t *testing.T) {
	t.Parallel()
	url := startEverything(t)
	ctx := ctxT(t, 60*time.Second)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	task, err := conn.CreateTask(ctx, "simulate-research-query", map[string]any{"topic": "tides"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := conn.Info()
	// Its task store binds tasks to the session: resume the session id on a
	// new connection and keep observing.
	resumed, err := mcpclient.Dial(ctx, mcpclient.Options{URL: url, Resume: &mcpclient.Resume{SessionID: info.SessionID, Capabilities: info.RawCapabilities}})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if s, err := resumed.GetTask(ctx, task.ID); err != nil || s.Task.ID != task.ID {
		t.Fatalf("observe on resumed session: %+v %v", s, err)
	}
	cr, err := resumed.CancelTask(ctx, task.ID)
	if err != nil || cr.Task == nil || cr.Task.Status != mcpclient.StatusCancelled {
		t.Fatalf("cancel %+v %v", cr, err)
	}
	// tasks/result on a cancelled task: -32603, tolerated as the outcome.
	o, err := resumed.AwaitOutcome(ctx, task.ID)
	if err != nil || o.Status != mcpclient.StatusCancelled {
		t.Fatalf("outcome after cancel %+v %v", o, err)
	}
	_, err = mcpclient.Dial(ctx, mcpclient.Options{URL: url, Resume: &mcpclient.Resume{SessionID: "forgotten-session"}})
	if !errorsIs(err, mcpclient.ErrSessionGone) {
		t.Fatalf("forgotten session: %v", err)
	}
}
