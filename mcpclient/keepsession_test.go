package mcpclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// closeAndResume creates a task on a fresh 2025-11-25 session, closes the connection and
// dials the stored session again. It returns the resumed connection (nil when the resume
// failed), the task id and the resume error.
func closeAndResume(t *testing.T, ctx context.Context, opts mcpclient.Options, tool string, args map[string]any) (mcpclient.Conn, string, error) {
	t.Helper()
	opts.Era = mcpclient.EraChoiceLegacy
	conn, err := mcpclient.Dial(ctx, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	task, err := conn.CreateTask(ctx, tool, args, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatalf("create task: %v", err)
	}
	info := conn.Info()
	if info.SessionID == "" {
		t.Fatal("no Mcp-Session-Id on a 2025-11-25 HTTP connection")
	}
	if err := conn.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	ropts := opts
	ropts.Resume = &mcpclient.Resume{SessionID: info.SessionID, Capabilities: info.RawCapabilities, ServerName: info.Name, ServerVersion: info.Version}
	resumed, err := mcpclient.Dial(ctx, ropts)
	if err != nil {
		return nil, task.ID, err
	}
	t.Cleanup(func() { _ = resumed.Close() })
	return resumed, task.ID, nil
}

// observeToEnd polls the task on conn until it is terminal.
func observeToEnd(t *testing.T, ctx context.Context, conn mcpclient.Conn, taskID string) mcpclient.Snapshot {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := conn.GetTask(ctx, taskID)
		if err != nil {
			t.Fatalf("observe task %s on the resumed session: %v", taskID, err)
		}
		if s.Task.Status.Terminal() {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("task %s still %s", taskID, s.Task.Status)
		case <-tick.C:
		}
	}
}

func TestKeepSessionOnCloseResumesTheSessionAndItsTasks(t *testing.T) {
	t.Parallel()
	peers := []struct {
		name string
		url  func(t *testing.T) (url, token string)
		tool string
		args map[string]any
	}{
		{"reference receiver", func(t *testing.T) (string, string) {
			rig := startReceiver(t, receiver.Config{Eras: receiver.ErasLegacy})
			return rig.url, "tok-a"
		}, receiver.ToolWorkOptional, map[string]any{"duration_ms": 300, "text": "kept"}},
		{"server-everything", func(t *testing.T) (string, string) { return startEverything(t), "" },
			"simulate-research-query", map[string]any{"topic": "tides"}},
	}
	for _, p := range peers {
		t.Run(p.name+"/kept session observes its task to the end", func(t *testing.T) {
			t.Parallel()
			url, token := p.url(t)
			ctx := ctxT(t, 60*time.Second)
			resumed, taskID, err := closeAndResume(t, ctx, mcpclient.Options{URL: url, Token: token, KeepSessionOnClose: true}, p.tool, p.args)
			if err != nil {
				t.Fatalf("resume a session kept at close: %v", err)
			}
			s := observeToEnd(t, ctx, resumed, taskID)
			if s.Task.Status != mcpclient.StatusCompleted {
				t.Fatalf("task ended %s, want completed", s.Task.Status)
			}
			o, err := resumed.AwaitOutcome(ctx, taskID)
			if err != nil || o.Status != mcpclient.StatusCompleted {
				t.Fatalf("outcome on the resumed session: %+v %v", o, err)
			}
		})
		t.Run(p.name+"/default close ends the session", func(t *testing.T) {
			t.Parallel()
			url, token := p.url(t)
			ctx := ctxT(t, 60*time.Second)
			_, _, err := closeAndResume(t, ctx, mcpclient.Options{URL: url, Token: token}, p.tool, p.args)
			if !errorsIs(err, mcpclient.ErrSessionGone) {
				t.Fatalf("resume after a closing DELETE: %v, want ErrSessionGone", err)
			}
		})
	}
}
