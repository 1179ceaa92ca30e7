package mcpclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// extPeer is a small 2026-07-28 tasks-extension server for the client's
// extension-era tests: stateless POSTs, header checks, resultType answers.
type extPeer struct {
	advertiseLegacyTasks bool // a modern server wrongly advertising capabilities.tasks

	mu       sync.Mutex
	tasks    map[string]*extTask
	seq      int
	declared map[string]bool // tool name → did the last call declare the extension
	updates  map[string]int  // input key → tasks/update count
	methods  []string
}

type extTask struct {
	id, tool string
	status   string
	polls    int
	args     map[string]any
	answer   any
}

func newExtPeer() *extPeer {
	return &extPeer{tasks: map[string]*extTask{}, declared: map[string]bool{}, updates: map[string]int{}}
}

func (p *extPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name           string                     `json:"name"`
			TaskID         string                     `json:"taskId"`
			Arguments      map[string]any             `json:"arguments"`
			InputResponses map[string]json.RawMessage `json:"inputResponses"`
			RequestState   string                     `json:"requestState"`
			Meta           struct {
				Version string `json:"io.modelcontextprotocol/protocolVersion"`
				Caps    struct {
					Extensions map[string]any `json:"extensions"`
				} `json:"io.modelcontextprotocol/clientCapabilities"`
			} `json:"_meta"`
		} `json:"params"`
	}
	reply := func(status int, v map[string]any) {
		v["jsonrpc"] = "2.0"
		v["id"] = req.ID
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(status, code int, msg string, data any) {
		e := map[string]any{"code": code, "message": msg}
		if data != nil {
			e["data"] = data
		}
		reply(status, map[string]any{"error": e})
	}
	if err := json.Unmarshal(body, &req); err != nil {
		fail(400, -32700, "parse error", nil)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.methods = append(p.methods, req.Method)
	if r.Header.Get("MCP-Protocol-Version") != "2026-07-28" || req.Params.Meta.Version != "2026-07-28" {
		fail(400, -32022, "unsupported protocol version", map[string]any{"supported": []string{"2026-07-28"}})
		return
	}
	if r.Header.Get("Mcp-Session-Id") != "" || r.Header.Get("Mcp-Method") != req.Method {
		fail(400, -32020, "header mismatch", nil)
		return
	}
	if strings.HasPrefix(req.Method, "tasks/") && r.Header.Get("Mcp-Name") != req.Params.TaskID {
		fail(400, -32020, "Mcp-Name does not match taskId", nil)
		return
	}
	_, declared := req.Params.Meta.Caps.Extensions[mcpclient.ExtensionName]
	taskJSON := func(t *extTask) map[string]any {
		m := map[string]any{"taskId": t.id, "status": t.status, "createdAt": "2026-08-01T09:00:00Z",
			"lastUpdatedAt": "2026-08-01T09:00:00Z", "ttlMs": 60000, "pollIntervalMs": 10}
		return m
	}
	switch req.Method {
	case "server/discover":
		caps := map[string]any{"tools": map[string]any{}, "extensions": map[string]any{mcpclient.ExtensionName: map[string]any{}}}
		if p.advertiseLegacyTasks {
			caps["tasks"] = map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
		}
		reply(200, map[string]any{"result": map[string]any{"resultType": "complete", "supportedVersions": []string{"2026-07-28"},
			"capabilities": caps, "serverInfo": map[string]any{"name": "ext-peer", "version": "0.1"}}})
	case "tools/list":
		reply(200, map[string]any{"result": map[string]any{"resultType": "complete", "tools": []map[string]any{
			{"name": "slow", "inputSchema": map[string]any{"type": "object"}},
			{"name": "confirm", "inputSchema": map[string]any{"type": "object"}},
			{"name": "plain", "inputSchema": map[string]any{"type": "object"}},
			{"name": "mrtr", "inputSchema": map[string]any{"type": "object"}},
		}}})
	case "tools/call":
		p.declared[req.Params.Name] = declared
		switch req.Params.Name {
		case "plain":
			reply(200, map[string]any{"result": map[string]any{"resultType": "complete", "content": []map[string]any{{"type": "text", "text": "plain ok"}}}})
		case "mrtr":
			if req.Params.RequestState != "st-1" || req.Params.InputResponses["k"] == nil {
				reply(200, map[string]any{"result": map[string]any{"resultType": "input_required", "requestState": "st-1",
					"inputRequests": map[string]any{"k": map[string]any{"method": "elicitation/create", "params": map[string]any{
						"mode": "form", "message": "Which month?", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{"month": map[string]any{"type": "string"}}}}}}}})
				return
			}
			reply(200, map[string]any{"result": map[string]any{"resultType": "complete", "content": []map[string]any{{"type": "text", "text": "mrtr " + string(req.Params.InputResponses["k"])}}}})
		case "slow", "confirm":
			if !declared {
				fail(400, -32021, "tasks extension required", map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcpclient.ExtensionName: map[string]any{}}}})
				return
			}
			p.seq++
			t := &extTask{id: fmt.Sprintf("tk-%d", p.seq), tool: req.Params.Name, status: "working", args: req.Params.Arguments}
			if t.tool == "confirm" {
				t.status = "input_required"
			}
			p.tasks[t.id] = t
			m := taskJSON(t)
			m["resultType"] = "task"
			reply(200, map[string]any{"result": m})
		default:
			fail(200, -32602, "unknown tool", nil)
		}
	case "tasks/result", "tasks/list":
		fail(404, -32601, "method not found", nil)
	case "tasks/get", "tasks/update", "tasks/cancel":
		if !declared {
			fail(400, -32021, "tasks extension required", map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcpclient.ExtensionName: map[string]any{}}}})
			return
		}
		t := p.tasks[req.Params.TaskID]
		if t == nil {
			fail(200, -32602, "unknown task", nil)
			return
		}
		switch req.Method {
		case "tasks/cancel":
			if t.status == "working" || t.status == "input_required" {
				t.status = "cancelled"
			}
			reply(200, map[string]any{"result": map[string]any{"resultType": "complete"}})
			return
		case "tasks/update":
			for k, v := range req.Params.InputResponses {
				p.updates[k]++
				if k == "q1" && t.status == "input_required" {
					t.answer = v
					t.status = "working"
				}
			}
			reply(200, map[string]any{"result": map[string]any{"resultType": "complete"}})
			return
		}
		t.polls++
		if t.status == "working" && t.polls >= 2 {
			switch {
			case t.args["protocolError"] == true:
				t.status = "failed"
			default:
				t.status = "completed"
			}
		}
		m := taskJSON(t)
		m["resultType"] = "complete"
		switch t.status {
		case "input_required":
			m["inputRequests"] = map[string]any{"q1": map[string]any{"method": "elicitation/create", "params": map[string]any{
				"mode": "form", "message": "Overwrite?", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}}}
		case "completed":
			text := "done"
			if t.answer != nil {
				b, _ := json.Marshal(t.answer)
				text = "confirmed " + string(b)
			}
			m["result"] = map[string]any{"content": []map[string]any{{"type": "text", "text": text}}, "isError": t.args["fail"] == true}
		case "failed":
			m["error"] = map[string]any{"code": -32603, "message": "job broke"}
		}
		reply(200, map[string]any{"result": m})
	default:
		fail(404, -32601, "method not found", nil)
	}
}

func dialExt(tb testing.TB, p *extPeer, opts mcpclient.Options) mcpclient.Conn {
	tb.Helper()
	ts := httptest.NewServer(p)
	tb.Cleanup(ts.Close)
	opts.URL = ts.URL
	conn, err := mcpclient.Dial(ctxT(tb, 10*time.Second), opts)
	if err != nil {
		tb.Fatalf("dial extension peer: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestExtensionDetectionAndInfo(t *testing.T) {
	t.Parallel()
	det := mcpclient.NewDetector()
	p := newExtPeer()
	conn := dialExt(t, p, mcpclient.Options{Detector: det})
	info := conn.Info()
	if info.Era != mcpclient.EraExtension || info.ProtocolVersion != "2026-07-28" || info.SessionID != "" || !info.Capabilities.Extension || info.Name != "ext-peer" {
		t.Fatalf("info %+v", info)
	}
	if ev := info.Evidence; ev.Method != "server/discover" || ev.HTTPStatus != 200 || ev.Era != mcpclient.EraExtension {
		t.Errorf("evidence %+v", ev)
	}
	for _, tl := range conn.Tools() {
		if tl.TaskSupport != mcpclient.TaskServerDecides {
			t.Errorf("tool %s taskSupport %q", tl.Name, tl.TaskSupport)
		}
	}
	if len(conn.Tools()) != 4 {
		t.Errorf("tools %v", conn.Tools())
	}
}

func TestExtensionModernServerAdvertisingLegacyTasksIsNotExtension(t *testing.T) {
	t.Parallel()
	p := newExtPeer()
	p.advertiseLegacyTasks = true
	conn := dialExt(t, p, mcpclient.Options{})
	info := conn.Info()
	// A 2026-07-28-only server: the modern core is spoken without initialize.
	if info.Capabilities.Extension || !strings.Contains(info.Evidence.Answer, "extension not supported") {
		t.Fatalf("info %+v", info)
	}
	if _, err := conn.CreateTask(ctxT(t, 5*time.Second), "slow", nil, mcpclient.TaskOptions{}); !errorsIs(err, mcpclient.ErrTasksNotAdvertised) {
		t.Errorf("create: %v", err)
	}
}

func TestExtensionTaskFlows(t *testing.T) {
	t.Parallel()
	p := newExtPeer()
	inputs := make(chan mcpclient.InputRequest, 8)
	conn := dialExt(t, p, mcpclient.Options{Era: mcpclient.EraChoiceExtension, OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
	ctx := ctxT(t, 10*time.Second)

	// Plain call never declares the extension.
	res, err := conn.CallTool(ctx, "plain", nil, mcpclient.CallOptions{})
	if err != nil || res.Texts()[0] != "plain ok" {
		t.Fatalf("plain: %v %v", res, err)
	}
	// A task-only tool on the plain route: -32021 with requiredCapabilities.
	_, err = conn.CallTool(ctx, "slow", nil, mcpclient.CallOptions{})
	var req *mcpclient.ExtensionRequiredError
	if !errorsAs(err, &req) || !req.RequiresTasksExtension() || !errorsIs(err, mcpclient.ErrExtensionRequired) {
		t.Fatalf("plain call of a task-only tool: %v", err)
	}
	// MRTR: answered through the callback, retried with requestState.
	_, err = conn.CallTool(ctx, "mrtr", nil, mcpclient.CallOptions{})
	var ir *mcpclient.InputRequiredError
	if !errorsAs(err, &ir) || len(ir.Requests) != 1 || ir.Requests[0].Key != "k" {
		t.Fatalf("mrtr without Answer: %v", err)
	}
	res, err = conn.CallTool(ctx, "mrtr", nil, mcpclient.CallOptions{Answer: func(ctx context.Context, r mcpclient.InputRequest) (mcpclient.InputResponse, error) {
		return mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"month": "2026-07"}}, nil
	}})
	if err != nil || res.Texts()[0] != `mrtr {"action":"accept","content":{"month":"2026-07"}}` {
		t.Fatalf("mrtr: %v %v", res, err)
	}

	// Task route: create, poll, completed.
	task, err := conn.CreateTask(ctx, "slow", nil, mcpclient.TaskOptions{TTL: time.Hour})
	if err != nil || task.Era != mcpclient.EraExtension || task.TTL == nil || *task.TTL != time.Minute || task.PollInterval != 10*time.Millisecond {
		t.Fatalf("create: %+v %v", task, err)
	}
	out, err := conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusCompleted || out.ToolError || out.Result.Texts()[0] != "done" {
		t.Fatalf("outcome %+v %v", out, err)
	}
	// isError arrives as completed — tool error.
	task, _ = conn.CreateTask(ctx, "slow", map[string]any{"fail": true}, mcpclient.TaskOptions{})
	out, err = conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Describe() != "completed — tool error" {
		t.Fatalf("tool error outcome %+v %v", out, err)
	}
	// failed means a protocol error.
	task, _ = conn.CreateTask(ctx, "slow", map[string]any{"protocolError": true}, mcpclient.TaskOptions{})
	out, err = conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusFailed || out.Error == nil || out.Error.Code != -32603 {
		t.Fatalf("protocol error outcome %+v %v", out, err)
	}

	// Input: inputRequests in tasks/get, answered once via tasks/update.
	task, err = conn.CreateTask(ctx, "confirm", nil, mcpclient.TaskOptions{})
	if err != nil || task.Status != mcpclient.StatusInputRequired {
		t.Fatalf("confirm: %+v %v", task, err)
	}
	snap, err := conn.GetTask(ctx, task.ID)
	if err != nil || len(snap.InputRequests) != 1 || snap.InputRequests[0].Key != "q1" || snap.InputRequests[0].Message != "Overwrite?" {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	if _, err := conn.GetTask(ctx, task.ID); err != nil { // announced only once
		t.Fatal(err)
	}
	if got := <-inputs; got.Key != "q1" || got.TaskID != task.ID {
		t.Fatalf("OnInput %+v", got)
	}
	select {
	case dup := <-inputs:
		t.Fatalf("input announced twice: %+v", dup)
	default:
	}
	if err := conn.AnswerInput(ctx, task.ID, "q1", mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	if err := conn.AnswerInput(ctx, task.ID, "q1", mcpclient.InputResponse{Action: mcpclient.ActionAccept}); !errorsIs(err, mcpclient.ErrInputAnswered) {
		t.Fatalf("second answer: %v", err)
	}
	out, err = conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Result.Texts()[0] != `confirmed {"action":"accept","content":{"ok":true}}` {
		t.Fatalf("confirm outcome %+v %v", out, err)
	}

	// Cancel is an acknowledgement; polling shows the terminal state.
	task, _ = conn.CreateTask(ctx, "confirm", nil, mcpclient.TaskOptions{})
	cr, err := conn.CancelTask(ctx, task.ID)
	if err != nil || !cr.Acknowledged || cr.Task != nil {
		t.Fatalf("cancel %+v %v", cr, err)
	}
	out, err = conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusCancelled {
		t.Fatalf("after cancel %+v %v", out, err)
	}
	if _, err := conn.ListTasks(ctx, ""); !errorsIs(err, mcpclient.ErrNotSupported) {
		t.Errorf("list: %v", err)
	}
	if _, err := conn.GetTask(ctx, "tk-unknown"); !errorsIs(err, mcpclient.ErrUnknownTask) {
		t.Errorf("unknown: %v", err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.declared["plain"] || p.declared["mrtr"] || !p.declared["slow"] || !p.declared["confirm"] {
		t.Errorf("extension declared on the wrong calls: %v", p.declared)
	}
	if p.updates["q1"] != 1 {
		t.Errorf("q1 answered %d times", p.updates["q1"])
	}
	for _, m := range p.methods {
		if m == "tasks/result" || m == "initialize" {
			t.Errorf("extension client sent %s", m)
		}
	}
}

func TestDetectorCachesLegacyAndRechecks(t *testing.T) {
	t.Parallel()
	det := mcpclient.NewDetector()
	peer := newMCPGoPeer(t)
	ts := httptest.NewServer(peer.handler())
	t.Cleanup(ts.Close)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 2; i++ {
		conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL, Detector: det})
		if err != nil {
			t.Fatal(err)
		}
		ev := conn.Info().Evidence
		if ev.Era != mcpclient.EraLegacy || ev.Cached != (i == 1) {
			t.Errorf("dial %d evidence %+v", i, ev)
		}
		conn.Close()
	}
	if ev, ok := det.Lookup(ts.URL); !ok || ev.Era != mcpclient.EraLegacy {
		t.Errorf("cache %+v %v", ev, ok)
	}
}

func errorsAs[T any](err error, target *T) bool {
	if err == nil {
		return false
	}
	return asAny(err, target)
}
