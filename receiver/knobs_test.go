package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestKnobDropCreateResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		fault        Fault
		wantResponse bool
	}{
		{"drop before writing the CreateTaskResult", Fault{DropBeforeCreateResult: true}, false},
		{"drop after writing the CreateTaskResult", Fault{DropAfterCreateResult: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{})
			c := newLegacy(t, b, "")
			b.r.Knobs().SetTool(ToolWorkOptional, tc.fault)
			resp, err := c.post(context.Background(), obj{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
				"params": obj{"name": ToolWorkOptional, "arguments": obj{"idempotency_key": "k1"}, "task": obj{}}})
			var got rpcResp
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
			}
			if tc.wantResponse && (err != nil || got.Result["task"] == nil) {
				t.Fatalf("want the CreateTaskResult: %v %v", err, got)
			}
			if !tc.wantResponse && err == nil {
				t.Fatalf("want a transport error, got %v", got)
			}
			ids := b.r.TaskIDs()
			if len(ids) != 1 {
				t.Fatalf("tasks held: %v", ids)
			}
			waitStatus(t, b.r, ids[0], StatusCompleted)
			cn := b.r.Counters()
			if cn.ToolCalls[ToolWorkOptional] != 1 || cn.ToolCallsByKey["k1"] != 1 || cn.Dropped != 1 || cn.Effects != 1 {
				t.Fatalf("counters %+v", cn)
			}
			// The session still works on a new connection; the task is observable. The
			// dropped connection may still sit in the client's pool (its answer was whole, and
			// nothing said it would close): a POST on it would fail, and is not retried.
			http.DefaultClient.CloseIdleConnections()
			if st := c.mustCall("get", "tasks/get", obj{"taskId": ids[0]})["status"]; st != "completed" {
				t.Fatalf("status %v", st)
			}
		})
	}
}

func TestKnobDropExtension(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.r.Knobs().Set(Fault{DropBeforeCreateResult: true})
	body, _ := json.Marshal(obj{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": obj{"name": ToolSlowCompute, "arguments": obj{"seconds": 0},
		"_meta": obj{MetaProtocolVersion: VersionExtension, MetaClientCapabilities: obj{"extensions": obj{ExtensionTasks: obj{}}}}}})
	req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", bytes.NewReader(body))
	req.Header.Set("MCP-Protocol-Version", VersionExtension)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", ToolSlowCompute)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("want a dropped connection, got HTTP %d", resp.StatusCode)
	}
	if ids := b.r.TaskIDs(); len(ids) != 1 {
		t.Fatalf("the task must exist although its CreateTaskResult was lost: %v", ids)
	}
}

func TestKnobDuplicateDeliveryAppliesOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	b.r.Knobs().Set(Fault{Duplicate: true})
	id, _ := c.createTask(ToolWorkOptional, obj{"idempotency_key": "pay-1", "effect": "payment"}, 0)
	c.mustCall("result", "tasks/result", obj{"taskId": id})
	ids := b.r.TaskIDs()
	if len(ids) != 2 {
		t.Fatalf("duplicate delivery should run the handler twice: tasks %v", ids)
	}
	for _, x := range ids {
		waitStatus(t, b.r, x, StatusCompleted)
	}
	plain := c.mustCall("plain", "tools/call", obj{"name": ToolWorkForbidden, "arguments": obj{"idempotency_key": "pay-2"}})
	if plain["content"] == nil {
		t.Fatalf("plain %v", plain)
	}
	waitFor(t, func() bool { return b.r.Counters().Executions[ToolWorkForbidden] == 2 })
	cn := b.r.Counters()
	if cn.Executions[ToolWorkOptional] != 2 || cn.ToolCalls[ToolWorkOptional] != 1 || cn.ToolCallsByKey["pay-1"] != 1 {
		t.Fatalf("counters %+v", cn)
	}
	waitFor(t, func() bool { return b.r.Counters().EffectsRefused == 2 })
	if cn := b.r.Counters(); cn.Effects != 2 {
		t.Fatalf("effects %d, want one per key", cn.Effects)
	}
	resp, err := http.Get(b.url + "/records/pay-1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rec Record
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil || rec.Status != RecordApplied || rec.Effect != "payment" || rec.ReceiptID == "" || rec.AppliedAt == nil {
		t.Fatalf("record %+v %v", rec, err)
	}
}

func TestKnobRefuseTasksGet(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	b.r.Knobs().RefuseTasksGet(2, time.Time{}, 0)
	for range 2 {
		mustErr(t, "refused get", second(c.call("tasks/get", obj{"taskId": id})), CodeInternalError)
	}
	c.mustCall("third get", "tasks/get", obj{"taskId": id})
	b.r.Knobs().RefuseTasksGet(0, time.Now().Add(time.Hour), http.StatusServiceUnavailable)
	resp, err := c.post(context.Background(), obj{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": obj{"taskId": id}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP %d, want 503", resp.StatusCode)
	}
	status, _, rerr := modernCall(t, b, "tasks/get", obj{"taskId": "task_x"}, modernOpts{})
	if status != http.StatusServiceUnavailable || rerr != nil {
		t.Fatalf("extension refused get: HTTP %d %v", status, rerr)
	}
	b.r.Knobs().Reset()
	c.mustCall("after reset", "tasks/get", obj{"taskId": id})
	if n := b.r.Counters().RefusedGets; n != 4 {
		t.Fatalf("RefusedGets = %d", n)
	}
}

func TestKnobDelay(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	b.r.Knobs().SetTool(ToolGreet, Fault{Delay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if resp, err := c.post(ctx, obj{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": obj{"name": ToolGreet}}); err == nil {
		resp.Body.Close()
		t.Fatal("a delayed response arrived before the client deadline")
	}
	b.r.Knobs().SetTool(ToolGreet, Fault{Delay: time.Millisecond})
	if got := c.mustCall("greet", "tools/call", obj{"name": ToolGreet, "arguments": obj{"name": "Ada"}}); got["content"].([]any)[0].(obj)["text"] != "Hello, Ada!" {
		t.Fatalf("greet %v", got)
	}
}

func TestRecordsAndJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	get := func(path string) (int, obj) {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var o obj
		_ = json.NewDecoder(resp.Body).Decode(&o)
		return resp.StatusCode, o
	}
	if st, _ := get("/records/unknown"); st != http.StatusNotFound {
		t.Fatalf("unknown record: HTTP %d", st)
	}
	c := newLegacy(t, b, "")
	res := c.mustCall("tool error", "tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"idempotency_key": "k-err", "outcome": OutcomeToolError}})
	if res["isError"] != true {
		t.Fatalf("%v", res)
	}
	if st, rec := get("/records/k-err"); st != 200 || rec["status"] != RecordNotApplied || rec["applied_at"] != nil {
		t.Fatalf("record after a tool error: %d %v", st, rec)
	}
	post := func(key string, body string) (int, Job) {
		req, _ := http.NewRequest(http.MethodPost, b.url+"/jobs", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var j Job
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &j)
		return resp.StatusCode, j
	}
	if st, _ := post("", `{}`); st != http.StatusBadRequest {
		t.Fatalf("no key: HTTP %d", st)
	}
	st1, j1 := post("job-1", `{"effect":"publish","duration_ms":5}`)
	st2, j2 := post("job-1", `{"effect":"publish","duration_ms":5}`)
	if st1 != http.StatusCreated || st2 != http.StatusOK || j1.ID != j2.ID {
		t.Fatalf("same key: %d %d %s %s", st1, st2, j1.ID, j2.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done, err := b.r.WaitJob(ctx, j1.ID)
	if err != nil || done.Status != JobSucceeded {
		t.Fatalf("job %+v %v", done, err)
	}
	if st, j := get("/jobs/" + j1.ID); st != 200 || j["status"] != JobSucceeded {
		t.Fatalf("GET job: %d %v", st, j)
	}
	if st, rec := get("/records/job-1"); st != 200 || rec["status"] != RecordApplied || rec["effect"] != "publish" {
		t.Fatalf("job record %d %v", st, rec)
	}
	_, jf := post("job-2", `{"outcome":"failed"}`)
	if done, _ := b.r.WaitJob(ctx, jf.ID); done.Status != JobFailed {
		t.Fatalf("failing job %+v", done)
	}
	if st, rec := get("/records/job-2"); st != 200 || rec["status"] != RecordNotApplied {
		t.Fatalf("failed job record %d %v", st, rec)
	}
	if st, _ := get("/jobs/job_nope"); st != http.StatusNotFound {
		t.Fatalf("unknown job: HTTP %d", st)
	}
	if b.r.Counters().Effects != 1 {
		t.Fatalf("effects %d", b.r.Counters().Effects)
	}
}

func TestOperationIDFromMeta(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	c.mustCall("call", "tools/call", obj{"name": ToolWorkOptional, "arguments": obj{}, "_meta": obj{MetaOperationID: "op-42"}})
	if rec, found := b.r.Records().Get("op-42"); !found || rec.Status != RecordApplied {
		t.Fatalf("record %+v %v", rec, found)
	}
	if b.r.Counters().ToolCallsByKey["op-42"] != 1 {
		t.Fatal("call not counted by operation id")
	}
}

func TestEffectAtStartSurvivesCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	id, _ := c.createTask(ToolWorkRequired, obj{"idempotency_key": "early", "effect_at": "start", "outcome": OutcomeHang}, 0)
	waitFor(t, func() bool { r, _ := b.r.Records().Get("early"); return r.Status == RecordApplied })
	c.mustCall("cancel", "tasks/cancel", obj{"taskId": id})
	if r, _ := b.r.Records().Get("early"); r.Status != RecordApplied {
		t.Fatal("cancelled must not undo an applied effect")
	}
}

func TestValidTransition(t *testing.T) {
	t.Parallel()
	all := []Status{StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled}
	allowed := map[[2]Status]bool{
		{StatusWorking, StatusInputRequired}: true, {StatusWorking, StatusCompleted}: true, {StatusWorking, StatusFailed}: true, {StatusWorking, StatusCancelled}: true,
		{StatusInputRequired, StatusWorking}: true, {StatusInputRequired, StatusCompleted}: true, {StatusInputRequired, StatusFailed}: true, {StatusInputRequired, StatusCancelled}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := ValidTransition(from, to); got != allowed[[2]Status{from, to}] {
				t.Errorf("%s → %s: %v", from, to, got)
			}
		}
	}
	// The store refuses an invalid transition and counts it.
	b := setup(t, Config{})
	tk, rerr := b.r.tasks.create(anonymous, eraLegacy, "x", "", time.Minute, nil)
	if rerr != nil {
		t.Fatal(rerr)
	}
	b.r.tasks.finish(tk, textResult("ok", false), nil)
	b.r.tasks.mu.Lock()
	refused := !b.r.tasks.transitionLocked(tk, StatusWorking, "again")
	b.r.tasks.mu.Unlock()
	if !refused || b.r.History(tk.id)[1] != StatusCompleted || len(b.r.History(tk.id)) != 2 {
		t.Fatalf("terminal task changed: %v", b.r.History(tk.id))
	}
	b.r.tasks.finish(tk, nil, errf(CodeInternalError, "late"))
	if h := b.r.History(tk.id); len(h) != 2 {
		t.Fatalf("terminal is not final: %v", h)
	}
}

func TestKnobThrottleTasksGetAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	b.r.Knobs().ThrottleTasksGet(1, time.Time{}, 2500*time.Millisecond)
	resp, err := c.post(context.Background(), obj{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": obj{"taskId": id}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("HTTP %d Retry-After %q, want 429 and 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	c.mustCall("the next get", "tasks/get", obj{"taskId": id})
	if n := b.r.Counters().RefusedGets; n != 1 {
		t.Fatalf("refused gets %d, want 1", n)
	}
}
