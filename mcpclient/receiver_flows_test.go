package mcpclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// flowEnv is one way of reaching the reference receiver in one era. The
// flow tests run the same body in every env: callers of mcpclient.Conn never
// see which era or transport they use.
type flowEnv struct {
	name string
	era  mcpclient.Era
	rig  *httpRig // nil over stdio
}

// dial opens a connection in the env's era. Over HTTP the receiver serves
// both eras and the era is forced; over stdio a single-era receiver is
// detected automatically.
func (e flowEnv) dial(tb testing.TB, opts mcpclient.Options) mcpclient.Conn {
	tb.Helper()
	var conn mcpclient.Conn
	if e.rig != nil {
		opts.Era = eraChoice(e.era)
		conn = e.rig.dial(tb, opts)
	} else {
		conn = dialStdio(tb, opts, eraMode(e.era), "")
	}
	if got := conn.Info().Era; got != e.era {
		tb.Fatalf("%s: connected in era %s", e.name, got)
	}
	return conn
}

// forEachEnv runs body in parallel for both eras over HTTP and over stdio.
func forEachEnv(t *testing.T, body func(t *testing.T, env flowEnv)) {
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		for _, via := range []peerTransport{overHTTP, overStdio} {
			env := flowEnv{name: eraMode(era) + "/" + string(via), era: era}
			t.Run(env.name, func(t *testing.T) {
				t.Parallel()
				if via == overHTTP {
					env.rig = startReceiver(t, receiver.Config{})
				}
				body(t, env)
			})
		}
	}
}

func accept(content map[string]any) mcpclient.InputResponse {
	return mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: content}
}

// TestReceiverCreateInputResultCancelFlows runs create → input → result →
// cancel against the reference receiver through one Conn interface, in both
// eras and over both transports.
func TestReceiverCreateInputResultCancelFlows(t *testing.T) {
	t.Parallel()
	forEachEnv(t, func(t *testing.T, env flowEnv) {
		ctx := ctxT(t, 30*time.Second)
		inputs := make(chan mcpclient.InputRequest, 8)
		conn := env.dial(t, mcpclient.Options{OnInput: func(r mcpclient.InputRequest) { inputs <- r }})

		// create → result, with the operation id reaching the system of record.
		op := "op-complete-" + strings.ReplaceAll(env.name, "/", "-")
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 50, "text": "flow done"},
			mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: op}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if task.ID == "" || task.Status != mcpclient.StatusWorking || task.Era != env.era || task.PollInterval != rigPoll {
			t.Fatalf("created %+v", task)
		}
		out, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil {
			t.Fatalf("outcome: %v", err)
		}
		if out.Status != mcpclient.StatusCompleted || out.ToolError || out.Describe() != "completed" || out.Era != env.era ||
			len(out.Result.Texts()) != 1 || out.Result.Texts()[0] != "flow done" {
			t.Fatalf("outcome %+v (%s)", out, out.Describe())
		}
		if env.rig != nil {
			if rec := env.rig.record(t, op); rec.Status != receiver.RecordApplied || rec.ReceiptID == "" {
				t.Errorf("system of record for %s: %+v", op, rec)
			}
			if !strings.Contains(string(out.Result.Structured), op) {
				t.Errorf("result does not carry the idempotency key: %s", out.Result.Structured)
			}
		}

		// input in form mode: announced once, listed as pending, visible as
		// input_required, answered exactly once.
		task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input", "input_message": "Approve the form?"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatalf("create input task: %v", err)
		}
		results := make(chan outcomeOrErr, 1)
		go func() {
			o, err := conn.AwaitOutcome(ctx, task.ID)
			results <- outcomeOrErr{o, err}
		}()
		var req mcpclient.InputRequest
		select {
		case req = <-inputs:
		case <-ctx.Done():
			t.Fatal("no input request announced")
		}
		if req.TaskID != task.ID || req.Method != "elicitation/create" || req.Mode != mcpclient.InputForm || req.Message != "Approve the form?" ||
			len(req.RequestedSchema) != 1 || req.RequestedSchema[0] != (mcpclient.SchemaField{Name: "approve", Type: "boolean", Required: true}) {
			t.Fatalf("input request %+v", req)
		}
		if p := conn.PendingInput(task.ID); len(p) != 1 || p[0].Key != req.Key {
			t.Errorf("pending input %+v", p)
		}
		snap, err := conn.GetTask(ctx, task.ID)
		if err != nil || snap.Task.Status != mcpclient.StatusInputRequired || snap.Violation != nil {
			t.Fatalf("while waiting for input: %+v %v", snap, err)
		}
		if err := conn.AnswerInput(ctx, task.ID, req.Key, accept(map[string]any{"approve": true})); err != nil {
			t.Fatalf("answer: %v", err)
		}
		if err := conn.AnswerInput(ctx, task.ID, req.Key, accept(map[string]any{"approve": false})); !errorsIs(err, mcpclient.ErrInputAnswered) {
			t.Errorf("second answer to one key: %v", err)
		}
		r := <-results
		if r.err != nil || r.o.Status != mcpclient.StatusCompleted || r.o.Result.Texts()[0] != receiver.ToolWorkOptional+" approved and done" {
			t.Fatalf("after form input: %+v %v", r.o, r.err)
		}

		// input in URL mode.
		task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input", "input_mode": "url"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatalf("create url input task: %v", err)
		}
		go func() {
			o, err := conn.AwaitOutcome(ctx, task.ID)
			results <- outcomeOrErr{o, err}
		}()
		select {
		case req = <-inputs:
		case <-ctx.Done():
			t.Fatal("no url input request announced")
		}
		if req.Mode != mcpclient.InputURL || !strings.HasPrefix(req.URL, "https://approve.example.invalid/approve/") || req.ElicitationID == "" || len(req.RequestedSchema) != 0 {
			t.Fatalf("url input request %+v", req)
		}
		if err := conn.AnswerInput(ctx, task.ID, req.Key, mcpclient.InputResponse{Action: mcpclient.ActionAccept}); err != nil {
			t.Fatalf("answer url: %v", err)
		}
		if r := <-results; r.err != nil || r.o.Status != mcpclient.StatusCompleted || r.o.ToolError {
			t.Fatalf("after url input: %+v %v", r.o, r.err)
		}

		// isError: legacy "failed — tool error", extension "completed — tool error".
		task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "tool_error", "text": "disk full"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err = conn.AwaitOutcome(ctx, task.ID)
		wantStatus, wantLabel := mcpclient.StatusFailed, "failed — tool error"
		if env.era == mcpclient.EraExtension {
			wantStatus, wantLabel = mcpclient.StatusCompleted, "completed — tool error"
		}
		if err != nil || out.Status != wantStatus || !out.ToolError || out.Describe() != wantLabel || out.Error != nil ||
			out.Result == nil || !out.Result.IsError || out.Result.Texts()[0] != "disk full" {
			t.Fatalf("tool error outcome %+v (%s) %v", out, out.Describe(), err)
		}

		// A JSON-RPC error: failed — protocol error, in both eras; a tool's
		// own -32602 is its outcome, not an unknown task.
		for _, code := range []int{-32099, -32602} {
			task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "rpc_error", "error_code": code, "text": "ledger offline"}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out, err = conn.AwaitOutcome(ctx, task.ID)
			if err != nil || out.Status != mcpclient.StatusFailed || out.ToolError || out.Describe() != "failed — protocol error" ||
				out.Error == nil || out.Error.Code != code || out.Error.Message != "ledger offline" {
				t.Fatalf("rpc error %d outcome %+v %v", code, out, err)
			}
		}

		// cancel: legacy returns the cancelled Task; the extension only
		// acknowledges and polling shows the terminal status.
		task, err = conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cr, err := conn.CancelTask(ctx, task.ID)
		if err != nil {
			t.Fatalf("cancel: %v", err)
		}
		switch env.era {
		case mcpclient.EraLegacy:
			if cr.Acknowledged || cr.Task == nil || cr.Task.Status != mcpclient.StatusCancelled || cr.Task.ID != task.ID {
				t.Fatalf("legacy cancel %+v", cr)
			}
		default:
			if !cr.Acknowledged || cr.Task != nil {
				t.Fatalf("extension cancel %+v", cr)
			}
		}
		snap = waitStatus(t, ctx, conn, task.ID, mcpclient.StatusCancelled)
		if snap.Violation != nil {
			t.Errorf("violation %v", snap.Violation)
		}
		out, err = conn.AwaitOutcome(ctx, task.ID)
		if err != nil || out.Status != mcpclient.StatusCancelled || out.Describe() != "cancelled" {
			t.Fatalf("cancelled outcome %+v %v", out, err)
		}
		// Cancelling again: legacy -32602 on a terminal task (typed), the
		// extension acknowledges.
		cr, err = conn.CancelTask(ctx, task.ID)
		if env.era == mcpclient.EraLegacy {
			if !errorsIs(err, mcpclient.ErrTaskTerminal) || errorsIs(err, mcpclient.ErrUnknownTask) {
				t.Errorf("legacy cancel of a terminal task: %v", err)
			}
		} else if err != nil || !cr.Acknowledged {
			t.Errorf("extension cancel of a terminal task: %+v %v", cr, err)
		}

		// An unknown id: typed ErrUnknownTask on get, cancel and outcome.
		if _, err := conn.GetTask(ctx, "task_0000"); !errorsIs(err, mcpclient.ErrUnknownTask) {
			t.Errorf("get unknown: %v", err)
		}
		if _, err := conn.AwaitOutcome(ctx, "task_0000"); !errorsIs(err, mcpclient.ErrUnknownTask) {
			t.Errorf("outcome of unknown: %v", err)
		}
		if env.era == mcpclient.EraLegacy {
			if _, err := conn.CancelTask(ctx, "task_0000"); !errorsIs(err, mcpclient.ErrUnknownTask) {
				t.Errorf("cancel unknown: %v", err)
			}
		}
	})
}

// outcomeOrErr carries an AwaitOutcome answer across a channel.
type outcomeOrErr struct {
	o   mcpclient.Outcome
	err error
}

// TestReceiverTTLRequestedVersusGranted: legacy sends the requested ttl and
// the receiver grants it up to its cap; the extension sends none and the
// receiver sets ttlMs.
func TestReceiverTTLRequestedVersusGranted(t *testing.T) {
	t.Parallel()
	forEachEnv(t, func(t *testing.T, env flowEnv) {
		ctx := ctxT(t, 20*time.Second)
		conn := env.dial(t, mcpclient.Options{})
		cases := []struct {
			requested, legacy time.Duration
		}{
			{0, 5 * time.Minute},                 // none requested: the default
			{90 * time.Second, 90 * time.Second}, // granted as asked
			{48 * time.Hour, 10 * time.Minute},   // capped
		}
		for _, tc := range cases {
			task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{TTL: tc.requested})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.legacy
			if env.era == mcpclient.EraExtension {
				want = 5 * time.Minute // the server alone sets ttlMs
			}
			if task.TTL == nil || *task.TTL != want {
				t.Errorf("requested %v: granted %v, want %v", tc.requested, task.TTL, want)
			}
			exp, ok := task.ExpiresAt()
			if !ok || !exp.Equal(task.CreatedAt.Add(want)) {
				t.Errorf("expires %v %v", exp, ok)
			}
			snap, err := conn.GetTask(ctx, task.ID)
			if err != nil || snap.Task.TTL == nil || *snap.Task.TTL != want {
				t.Errorf("ttl on tasks/get %+v %v", snap.Task, err)
			}
		}
		if env.rig != nil {
			for _, w := range env.rig.wire.of("tools/call") {
				task, hasTask := w.Params["task"].(map[string]any)
				switch {
				case env.era == mcpclient.EraExtension && hasTask:
					t.Errorf("extension tools/call carried params.task %v", task)
				case env.era == mcpclient.EraLegacy && !hasTask:
					t.Errorf("legacy tools/call without params.task")
				}
			}
		}
	})
}

// TestReceiverPollIntervalHonoured: the suggested interval reaches the Task
// in both eras, and the extension's AwaitOutcome polls no faster than it.
func TestReceiverPollIntervalHonoured(t *testing.T) {
	t.Parallel()
	const poll = 150 * time.Millisecond
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			rig := startReceiver(t, receiver.Config{DefaultPollInterval: poll})
			conn := rig.dial(t, mcpclient.Options{Era: eraChoice(era)})
			ctx := ctxT(t, 20*time.Second)
			task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 700}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if task.PollInterval != poll {
				t.Fatalf("poll interval %v, want %v", task.PollInterval, poll)
			}
			if _, err := conn.AwaitOutcome(ctx, task.ID); err != nil {
				t.Fatal(err)
			}
			gets := rig.wire.of("tasks/get")
			if era == mcpclient.EraLegacy {
				// Legacy waits on tasks/result, then reads the status once.
				if n := len(rig.wire.of("tasks/result")); n != 1 || len(gets) != 1 {
					t.Errorf("legacy await: %d tasks/result, %d tasks/get", n, len(gets))
				}
				return
			}
			if len(gets) < 2 {
				t.Fatalf("extension await polled %d times", len(gets))
			}
			for i := 1; i < len(gets); i++ {
				if gap := gets[i].At.Sub(gets[i-1].At); gap < poll*9/10 {
					t.Errorf("poll %d came %v after the previous one, faster than pollIntervalMs %v", i, gap, poll)
				}
			}
		})
	}
}

// TestReceiverListPaginationAndTenantIsolation: legacy tasks/list pages with
// cursors through the caller's own tasks only; another tenant's task id
// answers exactly like an unknown one, in both eras.
func TestReceiverListPaginationAndTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			rig := startReceiver(t, receiver.Config{})
			ctx := ctxT(t, 30*time.Second)
			alice := rig.dial(t, mcpclient.Options{Era: eraChoice(era), Token: "tok-a"})
			bob := rig.dial(t, mcpclient.Options{Era: eraChoice(era), Token: "tok-b"})
			mine := map[string]bool{}
			var last string
			for i := 0; i < 23; i++ {
				task, err := alice.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
				if err != nil {
					t.Fatal(err)
				}
				mine[task.ID], last = true, task.ID
			}
			bobs, err := bob.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}

			// Another tenant's id answers exactly like an unknown id.
			const unknown = "task_ffffffffffffffffffffffffffffffff"
			_, foreignErr := bob.GetTask(ctx, last)
			_, unknownErr := bob.GetTask(ctx, unknown)
			if !errorsIs(foreignErr, mcpclient.ErrUnknownTask) || !sameShape(foreignErr, last, unknownErr, unknown) {
				t.Errorf("foreign get %v vs unknown %v", foreignErr, unknownErr)
			}
			_, foreignErr = bob.CancelTask(ctx, last)
			_, unknownErr = bob.CancelTask(ctx, unknown)
			if !errorsIs(foreignErr, mcpclient.ErrUnknownTask) || !sameShape(foreignErr, last, unknownErr, unknown) {
				t.Errorf("foreign cancel %v vs unknown %v", foreignErr, unknownErr)
			}
			_, foreignErr = bob.AwaitOutcome(ctx, last)
			_, unknownErr = bob.AwaitOutcome(ctx, unknown)
			if !errorsIs(foreignErr, mcpclient.ErrUnknownTask) || !sameShape(foreignErr, last, unknownErr, unknown) {
				t.Errorf("foreign outcome %v vs unknown %v", foreignErr, unknownErr)
			}
			if snap, err := alice.GetTask(ctx, last); err != nil || snap.Task.Status != mcpclient.StatusWorking {
				t.Errorf("the owner still sees its task: %+v %v", snap, err)
			}

			if era == mcpclient.EraExtension {
				if _, err := alice.ListTasks(ctx, ""); !errorsIs(err, mcpclient.ErrNotSupported) {
					t.Errorf("extension list: %v", err)
				}
				if n := len(rig.wire.of("tasks/list")); n != 0 {
					t.Errorf("extension client sent tasks/list %d times", n)
				}
				return
			}
			// Pagination through alice's tasks only.
			seen := map[string]bool{}
			cursor, pages := "", 0
			for {
				page, err := alice.ListTasks(ctx, cursor)
				if err != nil {
					t.Fatalf("list page %d: %v", pages, err)
				}
				pages++
				for _, tk := range page.Tasks {
					if !mine[tk.ID] || seen[tk.ID] {
						t.Errorf("page %d lists %s (foreign or repeated)", pages, tk.ID)
					}
					seen[tk.ID] = true
				}
				if page.NextCursor == "" {
					break
				}
				if pages == 1 && len(page.Tasks) != 20 {
					t.Errorf("first page has %d tasks", len(page.Tasks))
				}
				cursor = page.NextCursor
				if pages == 1 {
					// alice's cursor means nothing to bob.
					if _, err := bob.ListTasks(ctx, cursor); !errorsIs(err, mcpclient.ErrInvalidParams) {
						t.Errorf("foreign cursor: %v", err)
					}
				}
			}
			if pages != 2 || len(seen) != len(mine) {
				t.Errorf("%d pages listing %d of %d tasks", pages, len(seen), len(mine))
			}
			page, err := bob.ListTasks(ctx, "")
			if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != bobs.ID || page.NextCursor != "" {
				t.Errorf("bob's list %+v %v", page, err)
			}
			for id := range mine {
				if _, err := alice.CancelTask(ctx, id); err != nil {
					t.Errorf("cancel %s: %v", id, err)
				}
			}
		})
	}
}

var _ = context.Background
