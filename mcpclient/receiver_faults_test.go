package mcpclient_test

import (
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// forEachEra runs body in parallel for both eras against its own HTTP rig.
func forEachEra(t *testing.T, cfg receiver.Config, body func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn)) {
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			rig := startReceiver(t, cfg)
			// The client declares elicitation, so tasks may ask it for input.
			body(t, era, rig, rig.dial(t, mcpclient.Options{Era: eraChoice(era), OnInput: func(mcpclient.InputRequest) {}}))
		})
	}
}

// TestFaultDropBeforeCreateResultIsUnacknowledgedAndNeverRepeated: the
// receiver creates the task and cuts the connection before the
// CreateTaskResult; the client reports a typed create-unacknowledged and the
// receiver saw exactly one tools/call.
func TestFaultDropBeforeCreateResultIsUnacknowledgedAndNeverRepeated(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		rig.rcv.Knobs().SetTool(receiver.ToolWorkOptional, receiver.Fault{DropBeforeCreateResult: true})
		op := "op-drop-before-" + eraMode(era)
		_, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: op}})
		if !errorsIs(err, mcpclient.ErrCreateUnacknowledged) || !errorsIs(err, mcpclient.ErrTransportLost) {
			t.Fatalf("create over a dropped answer: %v", err)
		}
		// The connection still works afterwards, and nothing was resent.
		if _, err := conn.RefreshTools(ctx); err != nil {
			t.Fatalf("after the drop: %v", err)
		}
		c := rig.rcv.Counters()
		if c.ToolCalls[receiver.ToolWorkOptional] != 1 || c.ToolCallsByKey[op] != 1 || c.Methods["tools/call"] != 1 {
			t.Errorf("tools/call reached the receiver %d times (%d for %s), want exactly 1", c.ToolCalls[receiver.ToolWorkOptional], c.ToolCallsByKey[op], op)
		}
		if c.Dropped != 1 || c.TasksCreated != 1 {
			t.Errorf("dropped %d, tasks created %d: the task exists though unacknowledged", c.Dropped, c.TasksCreated)
		}
	})
}

// TestFaultDropAfterCreateResultKeepsTheTask: the answer arrives, then the
// connection dies; the task is usable on a new connection.
func TestFaultDropAfterCreateResultKeepsTheTask(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		rig.rcv.Knobs().SetTool(receiver.ToolWorkOptional, receiver.Fault{DropAfterCreateResult: true})
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 30}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatalf("create with the answer written before the drop: %v", err)
		}
		out, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil || out.Status != mcpclient.StatusCompleted {
			t.Fatalf("outcome after the drop %+v %v", out, err)
		}
		if c := rig.rcv.Counters(); c.Dropped != 1 || c.Methods["tools/call"] != 1 {
			t.Errorf("dropped %d, tools/call %d", c.Dropped, c.Methods["tools/call"])
		}
	})
}

// TestFaultRefuseTasksGetThenRecover: a refused tasks/get is a typed error
// (JSON-RPC -32603 → ErrInternal; a bare HTTP 503 → ErrTransportLost), never
// a task failure, and polling recovers once the receiver answers again.
func TestFaultRefuseTasksGetThenRecover(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rig.rcv.Knobs().RefuseTasksGet(1, time.Time{}, 0)
		if _, err := conn.GetTask(ctx, task.ID); !errorsIs(err, mcpclient.ErrInternal) || errorsIs(err, mcpclient.ErrUnknownTask) {
			t.Errorf("refused tasks/get (-32603): %v", err)
		}
		rig.rcv.Knobs().RefuseTasksGet(1, time.Time{}, 503)
		if _, err := conn.GetTask(ctx, task.ID); !errorsIs(err, mcpclient.ErrTransportLost) || errorsIs(err, mcpclient.ErrUnknownTask) {
			t.Errorf("refused tasks/get (HTTP 503): %v", err)
		}
		snap := waitStatus(t, ctx, conn, task.ID, mcpclient.StatusCompleted)
		if snap.Violation != nil {
			t.Errorf("violation %v", snap.Violation)
		}
		if c := rig.rcv.Counters(); c.RefusedGets != 2 {
			t.Errorf("refused %d gets", c.RefusedGets)
		}
	})
}

// TestFaultDuplicateDeliveryHasOneEffect: the receiver runs the delivered
// tools/call twice; the system of record still shows one effect for the
// operation id.
func TestFaultDuplicateDeliveryHasOneEffect(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		rig.rcv.Knobs().SetTool(receiver.ToolWorkOptional, receiver.Fault{Duplicate: true})
		op := "op-duplicate-" + eraMode(era)
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 20}, mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: op}})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := conn.AwaitOutcome(ctx, task.ID); err != nil || out.Status != mcpclient.StatusCompleted {
			t.Fatalf("outcome %+v %v", out, err)
		}
		eventually(t, ctx, "both deliveries executed and ended", func() bool {
			c := rig.rcv.Counters()
			return c.Executions[receiver.ToolWorkOptional] == 2 && c.Effects+c.EffectsRefused == 2
		})
		c := rig.rcv.Counters()
		if c.Effects != 1 || c.EffectsRefused != 1 || c.TasksCreated != 2 || c.Methods["tools/call"] != 1 {
			t.Errorf("counters %+v", c)
		}
		if rec := rig.record(t, op); rec.Status != receiver.RecordApplied || rec.AppliedAt == nil {
			t.Errorf("record %+v", rec)
		}
	})
}

// TestExtensionDeclaredOnlyOnTheTaskRoute: a plain call never declares the
// tasks extension, a task-only tool called plainly answers -32021 (typed),
// and task creation and the tasks/* requests declare it, with the headers
// the extension requires.
func TestExtensionDeclaredOnlyOnTheTaskRoute(t *testing.T) {
	t.Parallel()
	rig := startReceiver(t, receiver.Config{})
	conn := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension})
	ctx := ctxT(t, 20*time.Second)

	res, err := conn.CallTool(ctx, receiver.ToolGreet, map[string]any{"name": "Ada"}, mcpclient.CallOptions{OperationID: "op-plain"})
	if err != nil || res.Texts()[0] != "Hello, Ada!" {
		t.Fatalf("plain call %+v %v", res, err)
	}
	// A tool that may run as a task, called plainly, runs synchronously.
	res, err = conn.CallTool(ctx, receiver.ToolWorkOptional, nil, mcpclient.CallOptions{})
	if err != nil || res.IsError {
		t.Fatalf("plain call of an optional tool %+v %v", res, err)
	}
	_, err = conn.CallTool(ctx, receiver.ToolWorkRequired, nil, mcpclient.CallOptions{})
	var ext *mcpclient.ExtensionRequiredError
	if !errorsAs(err, &ext) || !errorsIs(err, mcpclient.ErrExtensionRequired) || !ext.RequiresTasksExtension() || ext.RPC.Code != -32021 {
		t.Fatalf("plain call of a task-only tool: %v", err)
	}
	calls := rig.wire.of("tools/call")
	if len(calls) != 3 {
		t.Fatalf("%d tools/call on the wire", len(calls))
	}
	for _, c := range calls {
		if c.declares() {
			t.Errorf("plain tools/call %v declared the extension", c.Params["name"])
		}
	}

	task, err := conn.CreateTask(ctx, receiver.ToolWorkRequired, nil, mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: "op-task"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := conn.AwaitOutcome(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	calls = rig.wire.of("tools/call")
	create := calls[len(calls)-1]
	meta, _ := create.Params["_meta"].(map[string]any)
	if !create.declares() || meta[mcpclient.MetaOperationID] != "op-task" || meta["io.modelcontextprotocol/protocolVersion"] != "2026-07-28" {
		t.Errorf("task-route tools/call _meta %v", meta)
	}
	if h := create.Header; h.Get("Mcp-Method") != "tools/call" || h.Get("Mcp-Name") != receiver.ToolWorkRequired || h.Get("MCP-Protocol-Version") != "2026-07-28" || h.Get("Mcp-Session-Id") != "" {
		t.Errorf("task-route headers %v", h)
	}
	gets := rig.wire.of("tasks/get")
	if len(gets) == 0 {
		t.Fatal("no tasks/get")
	}
	for _, g := range gets {
		if !g.declares() || g.Header.Get("Mcp-Name") != task.ID || g.Header.Get("Mcp-Method") != "tasks/get" {
			t.Errorf("tasks/get without the declaration or headers: %v %v", g.Header, g.Params["_meta"])
		}
	}
	// The legacy era refuses a plain call to a required tool before sending.
	legacy := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy})
	before := rig.rcv.Counters().Methods["tools/call"]
	if _, err := legacy.CallTool(ctx, receiver.ToolWorkRequired, nil, mcpclient.CallOptions{}); !errorsIs(err, mcpclient.ErrToolRequiresTask) {
		t.Errorf("legacy plain call of a required tool: %v", err)
	}
	if after := rig.rcv.Counters().Methods["tools/call"]; after != before {
		t.Errorf("the refused call reached the receiver")
	}
}
