package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestExtensionDiscover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		eras Eras
		want string
	}{
		{ErasBoth, "[2026-07-28 2025-11-25]"},
		{ErasExtension, "[2026-07-28]"},
	} {
		b := setup(t, Config{Eras: tc.eras})
		status, res, rerr := modernCall(t, b, "server/discover", nil, modernOpts{})
		mustOK(t, "discover", res, rerr)
		if status != http.StatusOK || fmt.Sprint(res["supportedVersions"]) != tc.want || res["resultType"] != "complete" {
			t.Fatalf("%v: HTTP %d %v", tc.eras, status, res)
		}
		caps := sub(res, "capabilities")
		if _, has := sub(caps, "extensions")[ExtensionTasks]; !has {
			t.Fatalf("no tasks extension: %v", caps)
		}
		if _, has := caps["tasks"]; has {
			t.Fatal("a modern server must not advertise capabilities.tasks")
		}
	}
}

func TestExtensionErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, created, _ := modernCall(t, b, "tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"outcome": OutcomeHang}}, modernOpts{})
	id := str(created, "taskId")
	for _, tc := range []struct {
		name       string
		method     string
		params     obj
		opts       modernOpts
		wantCode   int
		wantStatus int
	}{
		{"unsupported version is -32022", "tools/list", nil, modernOpts{version: "2099-01-01"}, CodeUnsupportedVersion, 400},
		{"Mcp-Name mismatch is -32020", "tasks/get", obj{"taskId": id}, modernOpts{headers: map[string]string{"Mcp-Name": "other"}}, CodeHeaderMismatch, 400},
		{"missing Mcp-Name is -32020", "tasks/get", obj{"taskId": id}, modernOpts{headers: map[string]string{"Mcp-Name": ""}}, CodeHeaderMismatch, 400},
		{"Mcp-Method mismatch is -32020", "tools/call", obj{"name": ToolGreet}, modernOpts{headers: map[string]string{"Mcp-Method": "tasks/get"}}, CodeHeaderMismatch, 400},
		{"header and _meta versions differ is -32020", "tools/list", nil, modernOpts{headers: map[string]string{"MCP-Protocol-Version": "2026-01-01"}}, CodeHeaderMismatch, 400},
		{"tasks/result is removed", "tasks/result", obj{"taskId": id}, modernOpts{}, CodeMethodNotFound, 404},
		{"tasks/list is removed", "tasks/list", nil, modernOpts{}, CodeMethodNotFound, 404},
		{"tasks/get without the extension is -32021", "tasks/get", obj{"taskId": id}, modernOpts{noDeclare: true}, CodeMissingCapability, 400},
		{"tasks/update without the extension is -32021", "tasks/update", obj{"taskId": id, "inputResponses": obj{}}, modernOpts{noDeclare: true}, CodeMissingCapability, 400},
		{"tasks/cancel without the extension is -32021", "tasks/cancel", obj{"taskId": id}, modernOpts{noDeclare: true}, CodeMissingCapability, 400},
		{"required tool without the extension is -32021", "tools/call", obj{"name": ToolWorkRequired}, modernOpts{noDeclare: true}, CodeMissingCapability, 400},
		{"unknown task is -32602", "tasks/get", obj{"taskId": "task_nope"}, modernOpts{}, CodeInvalidParams, 200},
		{"unknown task update is -32602", "tasks/update", obj{"taskId": "task_nope", "inputResponses": obj{}}, modernOpts{}, CodeInvalidParams, 200},
		{"unknown task cancel is -32602", "tasks/cancel", obj{"taskId": "task_nope"}, modernOpts{}, CodeInvalidParams, 200},
		{"null inputResponses is -32602", "tools/call", obj{"name": ToolConfirmDelete, "inputResponses": nil}, modernOpts{noDeclare: true}, CodeInvalidParams, 200},
		{"forged requestState is -32602", "tools/call", obj{"name": ToolConfirmDelete, "requestState": "x.y", "inputResponses": obj{}}, modernOpts{noDeclare: true}, CodeInvalidParams, 200},
	} {
		status, _, rerr := modernCall(t, b, tc.method, tc.params, tc.opts)
		mustErr(t, tc.name, rerr, tc.wantCode)
		if status != tc.wantStatus {
			t.Errorf("%s: HTTP %d, want %d", tc.name, status, tc.wantStatus)
		}
		if tc.wantCode == CodeMissingCapability && tc.method != "tools/call" || tc.name == "required tool without the extension is -32021" {
			d, _ := rerr.Data.(map[string]any)
			if _, has := sub(sub(d, "requiredCapabilities"), "extensions")[ExtensionTasks]; !has {
				t.Errorf("%s: data %v", tc.name, rerr.Data)
			}
		}
		if tc.wantCode == CodeUnsupportedVersion {
			d, _ := rerr.Data.(map[string]any)
			if fmt.Sprint(d["supported"]) != "[2026-07-28 2025-11-25]" {
				t.Errorf("%s: data %v", tc.name, rerr.Data)
			}
		}
	}
}

// getTask polls nothing: it reads one tasks/get snapshot.
func getTask(t testing.TB, b *bundle, id string, o modernOpts) obj {
	t.Helper()
	_, res, rerr := modernCall(t, b, "tasks/get", obj{"taskId": id}, o)
	return mustOK(t, "tasks/get", res, rerr)
}

func TestExtensionToolsCallResultTypes(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, tc := range []struct {
		name     string
		tool     string
		args     obj
		opts     modernOpts
		wantType string
	}{
		{"forbidden tool is complete even when declared", ToolWorkForbidden, obj{}, modernOpts{}, "complete"},
		{"optional tool without declaration is complete", ToolWorkOptional, obj{}, modernOpts{noDeclare: true}, "complete"},
		{"optional tool with declaration is a task", ToolWorkOptional, obj{}, modernOpts{}, "task"},
		{"legacy task param does not promote a sync tool", ToolGreet, obj{}, modernOpts{}, "complete"},
		{"input without a task is MRTR input_required", ToolWorkOptional, obj{"outcome": OutcomeInput}, modernOpts{noDeclare: true}, "input_required"},
		{"gathering tool asks by MRTR before the task", ToolWithTask, obj{}, modernOpts{}, "input_required"},
	} {
		p := obj{"name": tc.tool, "arguments": tc.args}
		if tc.tool == ToolGreet {
			p["task"] = obj{"ttl": 1000}
		}
		_, res, rerr := modernCall(t, b, "tools/call", p, tc.opts)
		mustOK(t, tc.name, res, rerr)
		if res["resultType"] != tc.wantType {
			t.Fatalf("%s: resultType %v: %v", tc.name, res["resultType"], res)
		}
		switch tc.wantType {
		case "task":
			for _, k := range []string{"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} {
				if _, has := res[k]; !has {
					t.Errorf("%s: CreateTaskResult lacks %s", tc.name, k)
				}
			}
			for _, k := range []string{"task", "ttl", "pollInterval", "result", "requestState"} {
				if _, has := res[k]; has {
					t.Errorf("%s: CreateTaskResult carries %s", tc.name, k)
				}
			}
		case "input_required":
			if len(sub(res, "inputRequests")) == 0 || str(res, "requestState") == "" {
				t.Errorf("%s: %v", tc.name, res)
			}
		}
	}
}

func TestExtensionMRTRThenTask(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, r1, rerr := modernCall(t, b, "tools/call", obj{"name": ToolWithTask, "arguments": obj{}}, modernOpts{})
	mustOK(t, "round 1", r1, rerr)
	var key string
	for k := range sub(r1, "inputRequests") {
		key = k
	}
	_, r2, rerr := modernCall(t, b, "tools/call", obj{"name": ToolWithTask, "arguments": obj{}, "requestState": r1["requestState"],
		"inputResponses": obj{key: obj{"action": "accept", "content": obj{"name": "Alice"}}}}, modernOpts{})
	mustOK(t, "round 2", r2, rerr)
	if r2["resultType"] != "task" {
		t.Fatalf("round 2: %v", r2)
	}
	id := str(r2, "taskId")
	waitStatus(t, b.r, id, StatusCompleted)
	got := getTask(t, b, id, modernOpts{})
	text := got["result"].(obj)["content"].([]any)[0].(obj)["text"].(string)
	if !strings.Contains(text, "Alice") {
		t.Fatalf("result %q", text)
	}
	if _, has := sub(got["result"].(obj), "_meta")[MetaRelatedTask]; has {
		t.Fatal("inlined result carries related-task _meta")
	}
	checkHistory(t, b.r, id, StatusWorking, StatusCompleted)
	// A synchronous MRTR round trip completes without a task.
	_, s1, _ := modernCall(t, b, "tools/call", obj{"name": ToolConfirmDelete, "arguments": obj{"filename": "x"}}, modernOpts{noDeclare: true})
	_, s2, rerr := modernCall(t, b, "tools/call", obj{"name": ToolConfirmDelete, "arguments": obj{"filename": "x"}, "requestState": s1["requestState"],
		"inputResponses": obj{"confirm": obj{"action": "accept", "content": obj{"confirm": true}}}}, modernOpts{noDeclare: true})
	mustOK(t, "sync MRTR", s2, rerr)
	if s2["resultType"] != "complete" || s2["content"].([]any)[0].(obj)["text"] != "Deleted x" {
		t.Fatalf("sync MRTR: %v", s2)
	}
}

func TestExtensionTaskOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	for _, tc := range []struct {
		name       string
		args       obj
		wantStatus Status
		check      func(obj) bool
	}{
		{"complete inlines the result", obj{}, StatusCompleted, func(g obj) bool { return g["result"] != nil && g["error"] == nil }},
		{"isError ends completed with the result", obj{"outcome": OutcomeToolError}, StatusCompleted, func(g obj) bool { return g["result"].(obj)["isError"] == true }},
		{"JSON-RPC error ends failed with error", obj{"outcome": OutcomeRPCError}, StatusFailed, func(g obj) bool { return g["result"] == nil && g["error"].(obj)["code"] == float64(CodeInternalError) }},
	} {
		_, res, rerr := modernCall(t, b, "tools/call", obj{"name": ToolWorkRequired, "arguments": tc.args}, modernOpts{})
		mustOK(t, tc.name, res, rerr)
		id := str(res, "taskId")
		waitStatus(t, b.r, id, tc.wantStatus)
		g := getTask(t, b, id, modernOpts{})
		if g["status"] != string(tc.wantStatus) || g["resultType"] != "complete" || !tc.check(g) {
			t.Fatalf("%s: %v", tc.name, g)
		}
		_, ack, rerr := modernCall(t, b, "tasks/cancel", obj{"taskId": id}, modernOpts{})
		mustOK(t, tc.name+" cancel terminal", ack, rerr)
		if len(ack) != 1 || ack["resultType"] != "complete" {
			t.Fatalf("%s: cancel ack %v", tc.name, ack)
		}
		checkHistory(t, b.r, id, StatusWorking, tc.wantStatus)
	}
	_, res, _ := modernCall(t, b, "tools/call", obj{"name": ToolWorkRequired, "arguments": obj{"outcome": OutcomeHang}}, modernOpts{})
	id := str(res, "taskId")
	_, ack, rerr := modernCall(t, b, "tasks/cancel", obj{"taskId": id}, modernOpts{})
	mustOK(t, "cancel", ack, rerr)
	if g := getTask(t, b, id, modernOpts{}); g["status"] != "cancelled" {
		t.Fatalf("after cancel: %v", g)
	}
	checkHistory(t, b.r, id, StatusWorking, StatusCancelled)
}

func TestExtensionUpdatePartialAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, res, rerr := modernCall(t, b, "tools/call", obj{"name": ToolMultiInput, "arguments": obj{}}, modernOpts{})
	mustOK(t, "multi_input", res, rerr)
	id := str(res, "taskId")
	waitStatus(t, b.r, id, StatusInputRequired)
	g := getTask(t, b, id, modernOpts{})
	reqs := sub(g, "inputRequests")
	if len(reqs) != 2 {
		t.Fatalf("inputRequests %v", reqs)
	}
	var keys []string
	for k, v := range reqs {
		keys = append(keys, k)
		if v.(obj)["method"] != "elicitation/create" {
			t.Fatalf("request %v", v)
		}
	}
	update := func(answers obj) {
		_, ack, rerr := modernCall(t, b, "tasks/update", obj{"taskId": id, "inputResponses": answers}, modernOpts{})
		mustOK(t, "tasks/update", ack, rerr)
		if len(ack) != 1 || ack["resultType"] != "complete" {
			t.Fatalf("update ack %v", ack)
		}
	}
	update(obj{keys[0]: obj{"action": "accept", "content": obj{"name": "one"}}, "unknown": obj{"action": "accept"}})
	g = getTask(t, b, id, modernOpts{})
	if g["status"] != "input_required" || len(sub(g, "inputRequests")) != 1 || sub(g, "inputRequests")[keys[1]] == nil {
		t.Fatalf("after a partial answer: %v", g)
	}
	update(obj{keys[0]: obj{"action": "decline"}}) // already answered: ignored
	update(obj{keys[1]: obj{"action": "accept", "content": obj{"name": "two"}}})
	waitStatus(t, b.r, id, StatusCompleted)
	g = getTask(t, b, id, modernOpts{})
	if text := g["result"].(obj)["content"].([]any)[0].(obj)["text"]; text != "Received 2 answers (accept, accept)" {
		t.Fatalf("result %v", text)
	}
	checkHistory(t, b.r, id, StatusWorking, StatusInputRequired, StatusWorking, StatusCompleted)
}

func TestExtensionTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Tokens: testTokens})
	_, res, rerr := modernCall(t, b, "tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"outcome": OutcomeHang}}, modernOpts{token: "tok-a"})
	mustOK(t, "create", res, rerr)
	id := str(res, "taskId")
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
		p := obj{"taskId": id, "inputResponses": obj{}}
		_, _, foreign := modernCall(t, b, m, p, modernOpts{token: "tok-b"})
		mustErr(t, m+" foreign", foreign, CodeInvalidParams)
		_, _, unknown := modernCall(t, b, m, obj{"taskId": "task_x", "inputResponses": obj{}}, modernOpts{token: "tok-b"})
		if strings.Replace(foreign.Message, id, "X", 1) != strings.Replace(unknown.Message, "task_x", "X", 1) {
			t.Fatalf("%s: %q vs %q", m, foreign.Message, unknown.Message)
		}
	}
	if g := getTask(t, b, id, modernOpts{token: "tok-a"}); g["status"] != "working" {
		t.Fatalf("owner sees %v", g["status"])
	}
	status, _, _ := modernCall(t, b, "tasks/get", obj{"taskId": id}, modernOpts{token: "wrong"})
	if status != http.StatusUnauthorized {
		t.Fatalf("bad token: HTTP %d", status)
	}
}

func TestExtensionSubscriptionsListen(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, res, _ := modernCall(t, b, "tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"outcome": OutcomeHang}}, modernOpts{})
	id := str(res, "taskId")
	params := obj{"notifications": obj{"taskIds": []any{id, "task_unknown"}}, "_meta": obj{MetaProtocolVersion: VersionExtension, MetaClientCapabilities: obj{"extensions": obj{ExtensionTasks: obj{}}}}}
	body, _ := json.Marshal(obj{"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", VersionExtension)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []obj
	readSSE(resp.Body, func(m obj) bool {
		got = append(got, m)
		if len(got) == 2 {
			_, _, _ = modernCall(t, b, "tasks/cancel", obj{"taskId": id}, modernOpts{})
		}
		return sub(m, "params")["status"] != "cancelled"
	})
	if len(got) != 3 || got[0]["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("messages %v", got)
	}
	if acc := sub(sub(got[0], "params"), "notifications")["taskIds"].([]any); len(acc) != 1 || acc[0] != id {
		t.Fatalf("acknowledged %v", acc)
	}
	last := sub(got[2], "params")
	if got[2]["method"] != "notifications/tasks" || last["taskId"] != id || str(sub(last, "_meta"), MetaSubscriptionID) == "" {
		t.Fatalf("notification %v", got[2])
	}
}

func TestEraModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		eras           Eras
		modernStatus   int
		modernCode     int
		initializeCode int // 0 = succeeds
	}{
		{"both serves each era", ErasBoth, 200, 0, 0},
		{"legacy only makes a modern client fall back", ErasLegacy, 400, CodeInvalidRequest, 0},
		{"extension only refuses initialize with -32022", ErasExtension, 200, 0, CodeUnsupportedVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Eras: tc.eras})
			status, _, rerr := modernCall(t, b, "server/discover", nil, modernOpts{})
			if status != tc.modernStatus {
				t.Fatalf("discover: HTTP %d, want %d", status, tc.modernStatus)
			}
			if tc.modernCode != 0 {
				mustErr(t, "discover", rerr, tc.modernCode)
				switch rerr.Code {
				case CodeHeaderMismatch, CodeMissingCapability, CodeUnsupportedVersion:
					t.Fatalf("a legacy-only receiver answered with a modern code %d", rerr.Code)
				}
			} else if rerr != nil {
				t.Fatalf("discover: %v", rerr)
			}
			c := &legacyClient{t: t, b: b}
			body, _ := json.Marshal(obj{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": obj{"protocolVersion": VersionLegacy, "capabilities": obj{}, "clientInfo": obj{"name": "t", "version": "1"}}})
			resp, err := c.post(context.Background(), json.RawMessage(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out rpcResp
			_ = json.NewDecoder(resp.Body).Decode(&out)
			if tc.initializeCode == 0 {
				if out.Error != nil || resp.Header.Get("Mcp-Session-Id") == "" {
					t.Fatalf("initialize: %v", out.Error)
				}
				return
			}
			mustErr(t, "initialize", out.Error, tc.initializeCode)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("initialize: HTTP %d", resp.StatusCode)
			}
		})
	}
}
