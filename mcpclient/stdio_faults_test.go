package mcpclient_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// TestFaultStdioDropBeforeCreateResultIsUnacknowledgedAndNeverRepeated: over
// stdio the receiver creates the task and ends the connection before the
// CreateTaskResult. The client reports a typed create-unacknowledged, and the
// receiver's own counters (written by the subprocess as it stops) show
// exactly one tools/call: nothing was resent.
func TestFaultStdioDropBeforeCreateResultIsUnacknowledgedAndNeverRepeated(t *testing.T) {
	t.Parallel()
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 20*time.Second)
			counters := filepath.Join(t.TempDir(), "counters.json")
			opts := stdioReceiver(eraMode(era), "")
			opts.Env = append(opts.Env, stdioFaultEnv+"=drop_before_create", stdioCountersEnv+"="+counters)
			conn, err := mcpclient.Dial(ctx, opts)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			if conn.Info().Era != era {
				t.Fatalf("connected in era %s", conn.Info().Era)
			}
			op := "op-stdio-drop-before-" + eraMode(era)
			_, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"},
				mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: op}})
			if !errorsIs(err, mcpclient.ErrCreateUnacknowledged) || !errorsIs(err, mcpclient.ErrTransportLost) {
				t.Fatalf("create over a dropped answer: %v", err)
			}
			if errorsIs(err, mcpclient.ErrNotDelivered) {
				t.Errorf("a delivered create reported as not delivered: %v", err)
			}
			// Another create fails without reaching anyone: the connection
			// is gone and the client does not redial and resend.
			if _, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{}); err == nil {
				t.Errorf("a create on the dropped connection succeeded")
			}
			var c receiver.Counters
			eventually(t, ctx, "the stdio receiver wrote its counters", func() bool {
				b, err := os.ReadFile(counters)
				return err == nil && json.Unmarshal(b, &c) == nil
			})
			if c.Methods["tools/call"] != 1 || c.ToolCalls[receiver.ToolWorkOptional] != 1 || c.ToolCallsByKey[op] != 1 {
				t.Errorf("tools/call reached the receiver %d times (%d for %s), want exactly 1", c.Methods["tools/call"], c.ToolCallsByKey[op], op)
			}
			if c.Dropped != 1 || c.TasksCreated != 1 {
				t.Errorf("dropped %d, tasks created %d: the task exists though unacknowledged", c.Dropped, c.TasksCreated)
			}
		})
	}
}
