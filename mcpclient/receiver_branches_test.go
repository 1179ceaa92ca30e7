package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// One test per branch point of the extension reference's "Supporting both"
// list (1–9) and "Finding the era", each against the reference receiver.

// TestSupportingBoth1_EraChosenOncePerServerAndTaskIDsStayInTheirEra: the
// era is decided once per server (a Detector caches it) and a task id is
// only meaningful in the era that created it.
func TestSupportingBoth1_EraChosenOncePerServerAndTaskIDsStayInTheirEra(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	legacyOnly := startReceiver(t, receiver.Config{Eras: receiver.ErasLegacy})
	det := mcpclient.NewDetector()
	first := legacyOnly.dial(t, mcpclient.Options{Detector: det})
	second := legacyOnly.dial(t, mcpclient.Options{Detector: det})
	if ev := first.Info().Evidence; ev.Era != mcpclient.EraLegacy || ev.Cached || ev.Method != "server/discover" {
		t.Errorf("first dial evidence %+v", ev)
	}
	if ev := second.Info().Evidence; ev.Era != mcpclient.EraLegacy || !ev.Cached {
		t.Errorf("second dial evidence %+v", ev)
	}
	if n := len(legacyOnly.wire.of("server/discover")); n != 1 {
		t.Errorf("server/discover sent %d times for one server", n)
	}
	if ev, ok := det.Lookup(legacyOnly.url); !ok || ev.Era != mcpclient.EraLegacy {
		t.Errorf("detector entry %+v %v", ev, ok)
	}

	both := startReceiver(t, receiver.Config{})
	leg := both.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy})
	ext := both.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension})
	lt, err := leg.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
	if err != nil || lt.Era != mcpclient.EraLegacy {
		t.Fatalf("legacy create %+v %v", lt, err)
	}
	et, err := ext.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "hang"}, mcpclient.TaskOptions{})
	if err != nil || et.Era != mcpclient.EraExtension {
		t.Fatalf("extension create %+v %v", et, err)
	}
	if _, err := ext.GetTask(ctx, lt.ID); !errorsIs(err, mcpclient.ErrUnknownTask) {
		t.Errorf("legacy task id read in the extension era: %v", err)
	}
	if _, err := leg.GetTask(ctx, et.ID); !errorsIs(err, mcpclient.ErrUnknownTask) {
		t.Errorf("extension task id read in the legacy era: %v", err)
	}
	if page, err := leg.ListTasks(ctx, ""); err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != lt.ID {
		t.Errorf("legacy list shows other-era tasks: %+v %v", page, err)
	}
	for conn, id := range map[mcpclient.Conn]string{leg: lt.ID, ext: et.ID} {
		if _, err := conn.CancelTask(ctx, id); err != nil {
			t.Errorf("cancel in its own era: %v", err)
		}
	}
}

// TestSupportingBoth2_LegacySendsTaskOnlyToOptionalOrRequiredToolsExtensionDeclaresForAnyTool.
func TestSupportingBoth2_LegacySendsTaskOnlyToOptionalOrRequiredToolsExtensionDeclaresForAnyTool(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	rig := startReceiver(t, receiver.Config{})
	leg := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy})
	if _, err := leg.CreateTask(ctx, receiver.ToolWorkForbidden, nil, mcpclient.TaskOptions{}); !errorsIs(err, mcpclient.ErrToolForbidsTask) {
		t.Errorf("legacy task on a forbidden tool: %v", err)
	}
	if _, err := leg.CreateTask(ctx, receiver.ToolGreet, nil, mcpclient.TaskOptions{}); !errorsIs(err, mcpclient.ErrToolForbidsTask) {
		t.Errorf("legacy task on an unmarked tool: %v", err)
	}
	if n := len(rig.wire.of("tools/call")); n != 0 {
		t.Fatalf("refused creations reached the receiver (%d tools/call)", n)
	}
	for _, tool := range []string{receiver.ToolWorkOptional, receiver.ToolWorkRequired} {
		if _, err := leg.CreateTask(ctx, tool, nil, mcpclient.TaskOptions{}); err != nil {
			t.Errorf("legacy task on %s: %v", tool, err)
		}
	}
	if _, err := leg.CallTool(ctx, receiver.ToolWorkOptional, nil, mcpclient.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := rig.wire.of("tools/call")
	for i, c := range calls {
		_, hasTask := c.Params["task"]
		if hasTask != (i < 2) {
			t.Errorf("legacy tools/call %d (%v): params.task present=%v", i, c.Params["name"], hasTask)
		}
	}

	ext := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension})
	for _, tl := range ext.Tools() {
		if tl.TaskSupport != mcpclient.TaskServerDecides {
			t.Errorf("extension tool %s: %s", tl.Name, tl.TaskSupport)
		}
	}
	// Any tool may be asked; the server decides. greet answers at once.
	_, err := ext.CreateTask(ctx, receiver.ToolGreet, map[string]any{"name": "Lin"}, mcpclient.TaskOptions{})
	var nt *mcpclient.NoTaskError
	if !errorsAs(err, &nt) || !errorsIs(err, mcpclient.ErrTaskNotReturned) || nt.Result.Texts()[0] != "Hello, Lin!" {
		t.Errorf("extension task route on greet: %v", err)
	}
	if task, err := ext.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{}); err != nil || task.Era != mcpclient.EraExtension {
		t.Errorf("extension task on an optional tool %+v %v", task, err)
	}
	calls = rig.wire.of("tools/call")[len(calls):]
	if len(calls) != 2 {
		t.Fatalf("%d extension tools/call", len(calls))
	}
	for _, c := range calls {
		if _, hasTask := c.Params["task"]; hasTask || !c.declares() {
			t.Errorf("extension task-route call %v: params.task=%v declares=%v", c.Params["name"], hasTask, c.declares())
		}
	}
}

// TestSupportingBoth3_DecodingToolsCallLegacyTaskWrapperExtensionResultType:
// legacy reads CreateTaskResult{task} or a plain result; the extension
// switches on resultType complete, input_required (answered and retried with
// inputResponses and the echoed requestState) and task.
func TestSupportingBoth3_DecodingToolsCallLegacyTaskWrapperExtensionResultType(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	rig := startReceiver(t, receiver.Config{})
	leg := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceLegacy})
	if task, err := leg.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{}); err != nil || task.ID == "" {
		t.Errorf("legacy CreateTaskResult %+v %v", task, err)
	}
	if res, err := leg.CallTool(ctx, receiver.ToolGreet, nil, mcpclient.CallOptions{}); err != nil || res.Texts()[0] != "Hello, World!" {
		t.Errorf("legacy plain result %+v %v", res, err)
	}

	ext := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension, OnInput: func(mcpclient.InputRequest) {}})
	// complete
	if res, err := ext.CallTool(ctx, receiver.ToolGreet, nil, mcpclient.CallOptions{}); err != nil || res.Texts()[0] != "Hello, World!" {
		t.Errorf("resultType complete %+v %v", res, err)
	}
	// input_required without an answerer: typed.
	_, err := ext.CallTool(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input"}, mcpclient.CallOptions{})
	var ir *mcpclient.InputRequiredError
	if !errorsAs(err, &ir) || len(ir.Requests) != 1 || ir.Requests[0].Key != "approval" {
		t.Fatalf("resultType input_required without Answer: %v", err)
	}
	// input_required answered: the retry carries inputResponses and requestState.
	before := len(rig.wire.of("tools/call"))
	res, err := ext.CallTool(ctx, receiver.ToolWorkOptional, map[string]any{"outcome": "input"}, mcpclient.CallOptions{
		Answer: func(ctx context.Context, r mcpclient.InputRequest) (mcpclient.InputResponse, error) {
			return accept(map[string]any{"approve": true}), nil
		}})
	if err != nil || res.IsError || res.Texts()[0] != receiver.ToolWorkOptional+" approved and done" {
		t.Fatalf("multi-round-trip call %+v %v", res, err)
	}
	rounds := rig.wire.of("tools/call")[before:]
	if len(rounds) != 2 {
		t.Fatalf("%d rounds", len(rounds))
	}
	if _, has := rounds[0].Params["inputResponses"]; has {
		t.Error("first round carried inputResponses")
	}
	state, _ := rounds[1].Params["requestState"].(string)
	answers, _ := rounds[1].Params["inputResponses"].(map[string]any)
	if state == "" || answers["approval"] == nil {
		t.Errorf("retry params %v", rounds[1].Params)
	}
	// task, after an input round before the task exists.
	var asked []string
	task, err := ext.CreateTask(ctx, receiver.ToolWithTask, nil, mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{
		Answer: func(ctx context.Context, r mcpclient.InputRequest) (mcpclient.InputResponse, error) {
			asked = append(asked, r.Key)
			return accept(map[string]any{"name": "Ada"}), nil
		}}})
	if err != nil || task.Status != mcpclient.StatusWorking || len(asked) != 1 || asked[0] != "user_name" {
		t.Fatalf("resultType task after input %+v %v (asked %v)", task, err, asked)
	}
	out, err := ext.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Result.Texts()[0] != "Hello, Ada! The task is done." {
		t.Fatalf("outcome %+v %v", out, err)
	}
}

// TestSupportingBoth4_ResultFromTasksResultInLegacyInlinedInTasksGetInExtension.
func TestSupportingBoth4_ResultFromTasksResultInLegacyInlinedInTasksGetInExtension(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"text": "payload"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		snap := waitStatus(t, ctx, conn, task.ID, mcpclient.StatusCompleted)
		out, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil || out.Result.Texts()[0] != "payload" {
			t.Fatalf("outcome %+v %v", out, err)
		}
		results := len(rig.wire.of("tasks/result"))
		switch era {
		case mcpclient.EraLegacy:
			if snap.Outcome != nil || results != 1 {
				t.Errorf("legacy: snapshot outcome %v, %d tasks/result", snap.Outcome, results)
			}
		default:
			if snap.Outcome == nil || snap.Outcome.Result.Texts()[0] != "payload" || results != 0 {
				t.Errorf("extension: snapshot outcome %+v, %d tasks/result", snap.Outcome, results)
			}
		}
	})
}

// TestSupportingBoth5_InputThroughTasksResultInLegacyTasksUpdateInExtension:
// two questions at once; legacy serves the related-task elicitation/create
// requests arriving on the tasks/result stream, the extension answers
// inputRequests with tasks/update, each key once, partial answers allowed.
func TestSupportingBoth5_InputThroughTasksResultInLegacyTasksUpdateInExtension(t *testing.T) {
	t.Parallel()
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 20*time.Second)
			rig := startReceiver(t, receiver.Config{})
			inputs := make(chan mcpclient.InputRequest, 8)
			conn := rig.dial(t, mcpclient.Options{Era: eraChoice(era), OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
			task, err := conn.CreateTask(ctx, receiver.ToolMultiInput, nil, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			results := make(chan outcomeOrErr, 1)
			go func() {
				o, err := conn.AwaitOutcome(ctx, task.ID)
				results <- outcomeOrErr{o, err}
			}()
			var got []mcpclient.InputRequest
			for len(got) < 2 {
				select {
				case r := <-inputs:
					if r.TaskID != task.ID {
						t.Errorf("input request not tied to the task: %+v", r)
					}
					got = append(got, r)
				case <-ctx.Done():
					t.Fatalf("got %d of 2 input requests", len(got))
				}
			}
			// Legacy requests may arrive in any order: answer the first question first.
			if got[0].Message != "First question" {
				got[0], got[1] = got[1], got[0]
			}
			if got[0].Message != "First question" || got[1].Message != "Second question" {
				t.Fatalf("input requests %+v", got)
			}
			if err := conn.AnswerInput(ctx, task.ID, got[0].Key, accept(map[string]any{"name": "x"})); err != nil {
				t.Fatal(err)
			}
			if era == mcpclient.EraExtension {
				// Partial answer: still input_required, only the other key listed.
				snap, err := conn.GetTask(ctx, task.ID)
				if err != nil || snap.Task.Status != mcpclient.StatusInputRequired || len(snap.InputRequests) != 1 || snap.InputRequests[0].Key != got[1].Key {
					t.Fatalf("after a partial answer %+v %v", snap, err)
				}
			}
			if err := conn.AnswerInput(ctx, task.ID, got[1].Key, mcpclient.InputResponse{Action: mcpclient.ActionDecline}); err != nil {
				t.Fatal(err)
			}
			r := <-results
			if r.err != nil || r.o.Result.Texts()[0] != "Received 2 answers (accept, decline)" {
				t.Fatalf("outcome %+v %q %v", r.o, r.o.Result.Texts(), r.err)
			}
			select {
			case dup := <-inputs:
				t.Errorf("input announced twice: %+v", dup)
			default:
			}
			updates := rig.wire.of("tasks/update")
			switch era {
			case mcpclient.EraLegacy:
				if len(updates) != 0 || len(rig.wire.of("tasks/result")) == 0 {
					t.Errorf("legacy input used %d tasks/update", len(updates))
				}
			default:
				keys := map[string]int{}
				for _, u := range updates {
					for k := range u.Params["inputResponses"].(map[string]any) {
						keys[k]++
					}
					if u.Header.Get("Mcp-Name") != task.ID || !u.declares() {
						t.Errorf("tasks/update headers %v", u.Header)
					}
				}
				if len(keys) != 2 || keys[got[0].Key] != 1 || keys[got[1].Key] != 1 {
					t.Errorf("keys answered %v, want each once", keys)
				}
				if n := len(rig.wire.of("tasks/result")); n != 0 {
					t.Errorf("extension sent tasks/result %d times", n)
				}
			}
		})
	}
}

// TestSupportingBoth6_FailedIncludesToolErrorsInLegacyMeansProtocolErrorInExtension.
func TestSupportingBoth6_FailedIncludesToolErrorsInLegacyMeansProtocolErrorInExtension(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		job, err := conn.CreateTask(ctx, receiver.ToolFailingJob, map[string]any{"delay_ms": 10}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := conn.AwaitOutcome(ctx, job.ID)
		want := map[mcpclient.Era]string{mcpclient.EraLegacy: "failed — tool error", mcpclient.EraExtension: "completed — tool error"}[era]
		if err != nil || out.Describe() != want || !out.ToolError || out.Error != nil {
			t.Errorf("isError job: %+v (%s) %v", out, out.Describe(), err)
		}
		job, err = conn.CreateTask(ctx, receiver.ToolProtocolErrorJob, nil, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err = conn.AwaitOutcome(ctx, job.ID)
		if err != nil || out.Status != mcpclient.StatusFailed || out.ToolError || out.Error == nil || out.Error.Code != -32603 || out.Describe() != "failed — protocol error" {
			t.Errorf("protocol error job: %+v %v", out, err)
		}
	})
}

// TestSupportingBoth7_CancelReturnsTaskInLegacyOnlyAcknowledgedInExtension:
// cancelled while waiting for input; legacy answers the cancelled Task and
// -32602 on a terminal one, the extension acknowledges both and polling
// shows the terminal state.
func TestSupportingBoth7_CancelReturnsTaskInLegacyOnlyAcknowledgedInExtension(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		task, err := conn.CreateTask(ctx, receiver.ToolConfirmDelete, map[string]any{"filename": "a.txt"}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, ctx, conn, task.ID, mcpclient.StatusInputRequired)
		cr, err := conn.CancelTask(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if era == mcpclient.EraLegacy {
			if cr.Task == nil || cr.Task.Status != mcpclient.StatusCancelled || cr.Acknowledged {
				t.Errorf("legacy cancel %+v", cr)
			}
		} else if cr.Task != nil || !cr.Acknowledged {
			t.Errorf("extension cancel %+v", cr)
		}
		waitStatus(t, ctx, conn, task.ID, mcpclient.StatusCancelled)
		cr, err = conn.CancelTask(ctx, task.ID)
		if era == mcpclient.EraLegacy {
			var rpc *mcpclient.RPCError
			if !errorsIs(err, mcpclient.ErrTaskTerminal) || !errorsAs(err, &rpc) || rpc.Code != -32602 || cr.Task == nil || cr.Task.Status != mcpclient.StatusCancelled {
				t.Errorf("legacy cancel of a terminal task %+v %v", cr, err)
			}
		} else if err != nil || !cr.Acknowledged {
			t.Errorf("extension cancel of a terminal task %+v %v", cr, err)
		}
		if h := rig.rcv.History(task.ID); len(h) != 3 || h[2] != receiver.StatusCancelled {
			t.Errorf("history %v", h)
		}
	})
}

// TestSupportingBoth8_TTLRequestedInLegacySetByServerInExtensionWithoutListOrRelatedTask:
// the requested ttl travels only in legacy; the extension has no tasks/list
// and no related-task _meta.
func TestSupportingBoth8_TTLRequestedInLegacySetByServerInExtensionWithoutListOrRelatedTask(t *testing.T) {
	t.Parallel()
	forEachEra(t, receiver.Config{}, func(t *testing.T, era mcpclient.Era, rig *httpRig, conn mcpclient.Conn) {
		ctx := ctxT(t, 20*time.Second)
		task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{TTL: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		call := rig.wire.of("tools/call")[0]
		taskParam, _ := call.Params["task"].(map[string]any)
		switch era {
		case mcpclient.EraLegacy:
			if taskParam["ttl"] != float64(120000) || *task.TTL != 2*time.Minute {
				t.Errorf("legacy ttl sent %v granted %v", taskParam, task.TTL)
			}
			if _, err := conn.ListTasks(ctx, ""); err != nil {
				t.Errorf("legacy list: %v", err)
			}
		default:
			if taskParam != nil || *task.TTL != 5*time.Minute {
				t.Errorf("extension ttl sent %v granted %v", taskParam, task.TTL)
			}
			if _, err := conn.ListTasks(ctx, ""); !errorsIs(err, mcpclient.ErrNotSupported) || !errorsIs(err, mcpclient.ErrRemovedMethod) {
				t.Errorf("extension list: %v", err)
			}
			if _, err := conn.AwaitOutcome(ctx, task.ID); err != nil {
				t.Fatal(err)
			}
			rig.wire.mu.Lock()
			for _, r := range rig.wire.reqs {
				if b, _ := json.Marshal(r.Params); bytes.Contains(b, []byte("io.modelcontextprotocol/related-task")) || r.Method == "tasks/list" {
					t.Errorf("extension request %s carries legacy-only things: %s", r.Method, b)
				}
			}
			rig.wire.mu.Unlock()
		}
	})
}

// rewriteGetResultType answers every extension tasks/get with resultType
// "task", as one published example does.
func rewriteGetResultType(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") != "tasks/get" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := bytes.Replace(rec.Body.Bytes(), []byte(`"resultType":"complete"`), []byte(`"resultType":"task"`), 1)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

// TestSupportingBoth9_TasksGetParsedByStatusNotResultType.
func TestSupportingBoth9_TasksGetParsedByStatusNotResultType(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	rig := startReceiver(t, receiver.Config{}, rewriteGetResultType)
	conn := rig.dial(t, mcpclient.Options{Era: mcpclient.EraChoiceExtension})
	task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 50, "text": "tolerated"}, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := conn.GetTask(ctx, task.ID)
	if err != nil || snap.Task.ID != task.ID {
		t.Fatalf("tasks/get with resultType task: %+v %v", snap, err)
	}
	out, err := conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusCompleted || out.Result.Texts()[0] != "tolerated" {
		t.Fatalf("outcome %+v %v", out, err)
	}
}

// discoverShim answers server/discover itself with status and body and
// passes every other request on.
func discoverShim(status int, contentType, body string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				if bytes.Contains(b, []byte(`"server/discover"`)) {
					if contentType != "" {
						w.Header().Set("Content-Type", contentType)
					}
					w.WriteHeader(status)
					_, _ = io.WriteString(w, body)
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	}
}

func modernErrorBody(code int, data string) string {
	return `{"jsonrpc":"2.0","id":"tg-discover","error":{"code":` + itoa(code) + `,"message":"modern","data":` + data + `}}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestFindingTheEra_HTTPModernErrorBodyMeansModern: a 400 with -32022,
// -32021 or -32020 marks the server modern. Without a discover result there
// is no usable extension, so the client speaks the version -32022 offers
// (2025-11-25) through initialize.
func TestFindingTheEra_HTTPModernErrorBodyMeansModern(t *testing.T) {
	t.Parallel()
	for _, code := range []int{-32022, -32021, -32020} {
		t.Run(itoa(code), func(t *testing.T) {
			t.Parallel()
			rig := startReceiver(t, receiver.Config{}, discoverShim(400, "application/json", modernErrorBody(code, `{"supported":["2025-11-25"]}`)))
			conn := rig.dial(t, mcpclient.Options{})
			ev := conn.Info().Evidence
			if !ev.ModernServer || ev.ErrorCode != code || ev.HTTPStatus != 400 || ev.Era != mcpclient.EraLegacy || conn.Info().Era != mcpclient.EraLegacy {
				t.Errorf("evidence %+v", ev)
			}
			if code == -32022 && (len(ev.SupportedVersions) != 1 || ev.SupportedVersions[0] != "2025-11-25") {
				t.Errorf("supported versions %v", ev.SupportedVersions)
			}
		})
	}
}

// TestFindingTheEra_HTTPAnythingElseMeansLegacy: any other answer to the
// modern request — a legacy server's own 400, 404, 405, 5xx, HTML, a
// non-modern error code, a modern code on a status other than 400 — means
// legacy.
func TestFindingTheEra_HTTPAnythingElseMeansLegacy(t *testing.T) {
	t.Parallel()
	cases := map[string]func(http.Handler) http.Handler{
		"404 empty":                 discoverShim(404, "", ""),
		"405":                       discoverShim(405, "text/plain", "Method Not Allowed"),
		"500":                       discoverShim(500, "text/plain", "boom"),
		"200 html":                  discoverShim(200, "text/html", "<html>hello</html>"),
		"400 not json":              discoverShim(400, "text/plain", "Bad Request"),
		"400 -32600":                discoverShim(400, "application/json", modernErrorBody(-32600, `null`)),
		"400 -32000 session":        discoverShim(400, "application/json", modernErrorBody(-32000, `null`)),
		"403 with a modern code":    discoverShim(403, "application/json", modernErrorBody(-32021, `null`)),
		"legacy-only receiver 400s": func(h http.Handler) http.Handler { return h },
	}
	for name, mw := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := receiver.Config{}
			if name == "legacy-only receiver 400s" {
				cfg.Eras = receiver.ErasLegacy
			}
			rig := startReceiver(t, cfg, mw)
			conn, err := mcpclient.Dial(ctxT(t, 10*time.Second), mcpclient.Options{URL: rig.url, Token: "tok-a"})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer conn.Close()
			ev := conn.Info().Evidence
			if ev.ModernServer || ev.Era != mcpclient.EraLegacy || conn.Info().Era != mcpclient.EraLegacy || ev.Method != "server/discover" {
				t.Errorf("evidence %+v", ev)
			}
		})
	}
}

// TestFindingTheEra_StdioDiscoverResultMeansModern.
func TestFindingTheEra_StdioDiscoverResultMeansModern(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"both", "extension"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			conn := dialStdio(t, mcpclient.Options{}, mode, "")
			info := conn.Info()
			if info.Era != mcpclient.EraExtension || !info.Evidence.ModernServer || info.Evidence.ErrorCode != 0 || info.Name != "taskgate-reference-receiver" {
				t.Errorf("info %+v", info)
			}
		})
	}
}

// TestFindingTheEra_StdioUnsupportedVersionMeansModernThenASupportedVersion:
// -32022 names 2025-11-25, which the client then speaks (initialize).
func TestFindingTheEra_StdioUnsupportedVersionMeansModernThenASupportedVersion(t *testing.T) {
	t.Parallel()
	conn := dialStdio(t, mcpclient.Options{}, "legacy", "unsupported")
	ev := conn.Info().Evidence
	if conn.Info().Era != mcpclient.EraLegacy || ev.ErrorCode != -32022 || !ev.ModernServer || len(ev.SupportedVersions) != 1 || ev.SupportedVersions[0] != "2025-11-25" {
		t.Errorf("evidence %+v", ev)
	}
	if _, err := conn.CreateTask(ctxT(t, 10*time.Second), receiver.ToolWorkOptional, nil, mcpclient.TaskOptions{}); err != nil {
		t.Errorf("legacy task after -32022: %v", err)
	}
}

// TestFindingTheEra_StdioOtherErrorMeansLegacy: a legacy-only receiver
// answers server/discover with -32601.
func TestFindingTheEra_StdioOtherErrorMeansLegacy(t *testing.T) {
	t.Parallel()
	conn := dialStdio(t, mcpclient.Options{}, "legacy", "")
	ev := conn.Info().Evidence
	if conn.Info().Era != mcpclient.EraLegacy || ev.ErrorCode != -32601 || ev.ModernServer {
		t.Errorf("evidence %+v", ev)
	}
}

// TestFindingTheEra_StdioTimeoutMeansLegacy: no answer to server/discover
// within DiscoverTimeout means legacy.
func TestFindingTheEra_StdioTimeoutMeansLegacy(t *testing.T) {
	t.Parallel()
	conn := dialStdio(t, mcpclient.Options{DiscoverTimeout: 300 * time.Millisecond}, "legacy", "silent")
	ev := conn.Info().Evidence
	if conn.Info().Era != mcpclient.EraLegacy || ev.ErrorCode != 0 || ev.ModernServer || !strings.HasPrefix(ev.Answer, "no answer") {
		t.Errorf("evidence %+v", ev)
	}
}

// TestEraDetectionAgainstEveryPeer: server-everything and mcp-go v1.2.1 are
// legacy; the reference receiver is extension in "both" and "extension"
// modes and legacy in "legacy" mode, over HTTP and stdio.
func TestEraDetectionAgainstEveryPeer(t *testing.T) {
	t.Parallel()
	t.Run("server-everything", func(t *testing.T) {
		t.Parallel()
		url := startEverything(t)
		conn, err := mcpclient.Dial(ctxT(t, 30*time.Second), mcpclient.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if conn.Info().Era != mcpclient.EraLegacy {
			t.Errorf("server-everything: %+v", conn.Info().Evidence)
		}
	})
	for _, via := range []peerTransport{overHTTP, overStdio} {
		t.Run("mcp-go/"+string(via), func(t *testing.T) {
			t.Parallel()
			conn, _ := dialMCPGo(t, via, mcpclient.Options{})
			if conn.Info().Era != mcpclient.EraLegacy {
				t.Errorf("mcp-go over %s: %+v", via, conn.Info().Evidence)
			}
		})
	}
	want := map[string]mcpclient.Era{"both": mcpclient.EraExtension, "legacy": mcpclient.EraLegacy, "extension": mcpclient.EraExtension}
	for mode, era := range want {
		for _, via := range []peerTransport{overHTTP, overStdio} {
			t.Run("receiver-"+mode+"/"+string(via), func(t *testing.T) {
				t.Parallel()
				var conn mcpclient.Conn
				if via == overHTTP {
					conn = startReceiver(t, receiver.Config{Eras: erasOf(mode)}).dial(t, mcpclient.Options{})
				} else {
					conn = dialStdio(t, mcpclient.Options{}, mode, "")
				}
				if got := conn.Info().Era; got != era {
					t.Errorf("receiver %s over %s: era %s, evidence %+v", mode, via, got, conn.Info().Evidence)
				}
				if conn.Info().Evidence.Method != "server/discover" || conn.Info().Evidence.Forced {
					t.Errorf("evidence %+v", conn.Info().Evidence)
				}
			})
		}
	}
}
