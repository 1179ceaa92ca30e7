package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestLegacyInitializeAdvertisesTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		tokens   map[string]Identity
		token    string
		wantList bool
	}{
		{"authenticated declares list", testTokens, "tok-a", true},
		{"single user omits list", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Tokens: tc.tokens})
			c := &legacyClient{t: t, b: b, token: tc.token}
			res := c.mustCall("initialize", "initialize", obj{"protocolVersion": VersionLegacy, "capabilities": obj{}, "clientInfo": obj{"name": "t", "version": "1"}})
			if c.session == "" || !strings.HasPrefix(c.session, "sess_") {
				t.Fatalf("no session id issued: %q", c.session)
			}
			tasks := sub(sub(res, "capabilities"), "tasks")
			if sub(sub(tasks, "requests"), "tools")["call"] == nil || tasks["cancel"] == nil {
				t.Fatalf("capabilities.tasks = %v", tasks)
			}
			if _, has := tasks["list"]; has != tc.wantList {
				t.Fatalf("tasks.list present = %v, want %v", has, tc.wantList)
			}
			_, rerr := c.call("tasks/list", obj{})
			if tc.wantList && rerr != nil {
				t.Fatalf("tasks/list: %v", rerr)
			}
			if !tc.wantList {
				mustErr(t, "tasks/list single user", rerr, CodeMethodNotFound)
			}
		})
	}
}

func TestLegacySessionRules(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	post := func(headers map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"missing session is 400", map[string]string{}, http.StatusBadRequest},
		{"unknown session is 404", map[string]string{"Mcp-Session-Id": "sess_nope"}, http.StatusNotFound},
		{"wrong protocol version is 400", map[string]string{"Mcp-Session-Id": c.session, "MCP-Protocol-Version": "2025-06-17"}, http.StatusBadRequest},
		{"known session is 200", map[string]string{"Mcp-Session-Id": c.session, "MCP-Protocol-Version": VersionLegacy}, http.StatusOK},
	} {
		if got := post(tc.headers); got != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, got, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, b.url+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", c.session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: HTTP %d", resp.StatusCode)
	}
	if got := post(map[string]string{"Mcp-Session-Id": c.session}); got != http.StatusNotFound {
		t.Fatalf("after DELETE: HTTP %d, want 404", got)
	}
}

func TestLegacyToolsListTaskSupport(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	res := c.mustCall("tools/list", "tools/list", obj{})
	got := map[string]string{}
	for _, x := range res["tools"].([]any) {
		tool := x.(obj)
		got[tool["name"].(string)] = str(sub(tool, "execution"), "taskSupport")
	}
	want := map[string]string{ToolWorkForbidden: "forbidden", ToolWorkOptional: "optional", ToolWorkRequired: "required",
		ToolGreet: "", ToolSlowCompute: "optional", ToolFailingJob: "required", ToolConfirmDelete: "optional", ToolWithTask: "required"}
	for name, mode := range want {
		if m, has := got[name]; !has || m != mode {
			t.Errorf("tool %s: taskSupport %q (listed %v), want %q", name, m, has, mode)
		}
	}
}

func TestLegacyToolsCallNegotiation(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	for _, tc := range []struct {
		name      string
		tool      string
		augmented bool
		wantCode  int // 0 = success
		wantTask  bool
	}{
		{"augmented call to forbidden tool is -32601", ToolWorkForbidden, true, CodeMethodNotFound, false},
		{"augmented call to unmarked tool is -32601", ToolGreet, true, CodeMethodNotFound, false},
		{"plain call to required tool is -32601", ToolWorkRequired, false, CodeMethodNotFound, false},
		{"plain call to forbidden tool runs", ToolWorkForbidden, false, 0, false},
		{"plain call to optional tool runs", ToolWorkOptional, false, 0, false},
		{"augmented call to optional tool makes a task", ToolWorkOptional, true, 0, true},
		{"augmented call to required tool makes a task", ToolWorkRequired, true, 0, true},
		{"unknown tool is -32602", "no_such_tool", false, CodeInvalidParams, false},
	} {
		p := obj{"name": tc.tool, "arguments": obj{}}
		if tc.augmented {
			p["task"] = obj{}
		}
		res, rerr := c.call("tools/call", p)
		if tc.wantCode != 0 {
			mustErr(t, tc.name, rerr, tc.wantCode)
			continue
		}
		mustOK(t, tc.name, res, rerr)
		_, isTask := res["task"]
		if isTask != tc.wantTask {
			t.Errorf("%s: task in result = %v: %v", tc.name, isTask, res)
		}
		if !tc.wantTask && res["content"] == nil {
			t.Errorf("%s: no content: %v", tc.name, res)
		}
	}
	if n := b.r.Counters().ToolCalls[ToolWorkRequired]; n != 2 {
		t.Fatalf("tools/call count for %s = %d, want 2", ToolWorkRequired, n)
	}
}

func TestLegacyTaskOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	for _, tc := range []struct {
		name       string
		args       obj
		wantStatus Status
		wantErr    int  // tasks/result JSON-RPC error code
		wantIsErr  bool // tasks/result isError
	}{
		{"complete ends completed", obj{"duration_ms": 10}, StatusCompleted, 0, false},
		{"isError result ends failed", obj{"outcome": OutcomeToolError}, StatusFailed, 0, true},
		{"JSON-RPC error ends failed", obj{"outcome": OutcomeRPCError, "error_code": -32000}, StatusFailed, -32000, false},
	} {
		id, tk := c.createTask(ToolWorkOptional, tc.args, 0)
		if tk["status"] != "working" || tk["createdAt"] == nil || tk["lastUpdatedAt"] == nil || tk["pollInterval"] == nil {
			t.Fatalf("%s: CreateTaskResult task = %v", tc.name, tk)
		}
		res, rerr := c.call("tasks/result", obj{"taskId": id})
		got := c.mustCall(tc.name+" tasks/get", "tasks/get", obj{"taskId": id})
		if got["status"] != string(tc.wantStatus) {
			t.Errorf("%s: status %v, want %s", tc.name, got["status"], tc.wantStatus)
		}
		if tc.wantErr != 0 {
			mustErr(t, tc.name, rerr, tc.wantErr)
			if str(sub(sub(rerr.Data.(obj), "_meta"), MetaRelatedTask), "taskId") != id {
				t.Errorf("%s: error lacks related-task _meta: %v", tc.name, rerr.Data)
			}
		} else {
			mustOK(t, tc.name, res, rerr)
			if (res["isError"] == true) != tc.wantIsErr {
				t.Errorf("%s: isError = %v", tc.name, res["isError"])
			}
			if str(sub(sub(res, "_meta"), MetaRelatedTask), "taskId") != id {
				t.Errorf("%s: result lacks related-task _meta: %v", tc.name, res)
			}
		}
		checkHistory(t, b.r, id, StatusWorking, tc.wantStatus)
		mustErr(t, tc.name+": cancel terminal", second(c.call("tasks/cancel", obj{"taskId": id})), CodeInvalidParams)
		checkHistory(t, b.r, id, StatusWorking, tc.wantStatus)
	}
}

func second(_ obj, e *rpcError) *rpcError { return e }

func TestLegacyCancelSetsCancelledBeforeResponding(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	id, _ := c.createTask(ToolWorkRequired, obj{"outcome": OutcomeHang}, 0)
	resultDone := make(chan *rpcError, 1)
	go func() {
		_, rerr := c.call("tasks/result", obj{"taskId": id})
		resultDone <- rerr
	}()
	res := c.mustCall("tasks/cancel", "tasks/cancel", obj{"taskId": id})
	if res["status"] != "cancelled" {
		t.Fatalf("cancel returned status %v", res["status"])
	}
	got := c.mustCall("tasks/get", "tasks/get", obj{"taskId": id})
	if got["status"] != "cancelled" {
		t.Fatalf("tasks/get after cancel: %v", got["status"])
	}
	mustErr(t, "tasks/result of cancelled task", <-resultDone, CodeInternalError)
	mustErr(t, "second cancel", second(c.call("tasks/cancel", obj{"taskId": id})), CodeInvalidParams)
	checkHistory(t, b.r, id, StatusWorking, StatusCancelled)
}

func TestLegacyInputRequiredFlow(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"form", "url"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{})
			c := newLegacy(t, b, "")
			c.onRequest = func(m obj) any {
				if mode == "url" {
					return obj{"action": "accept"}
				}
				return obj{"action": "accept", "content": obj{"approve": true}}
			}
			id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeInput, "input_mode": mode, "idempotency_key": "key-" + mode}, 0)
			waitStatus(t, b.r, id, StatusInputRequired)
			got := c.mustCall("tasks/get", "tasks/get", obj{"taskId": id})
			if got["status"] != "input_required" {
				t.Fatalf("status %v", got["status"])
			}
			res := c.mustCall("tasks/result", "tasks/result", obj{"taskId": id})
			if res["isError"] == true {
				t.Fatalf("result is an error: %v", res)
			}
			el := <-c.seen
			p := sub(el, "params")
			if el["method"] != "elicitation/create" || p["mode"] != mode {
				t.Fatalf("elicitation = %v", el)
			}
			if str(sub(sub(p, "_meta"), MetaRelatedTask), "taskId") != id {
				t.Fatalf("elicitation lacks related-task _meta: %v", p)
			}
			checkHistory(t, b.r, id, StatusWorking, StatusInputRequired, StatusWorking, StatusCompleted)
			if rec, found := b.r.Records().Get("key-" + mode); !found || rec.Status != RecordApplied {
				t.Fatalf("record = %+v %v", rec, found)
			}
		})
	}
}

func TestLegacyGetStreamCarriesStatusAndInput(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.r.Knobs().DeliverInputOnGetStream(true)
	c := newLegacy(t, b, "")
	c.onRequest = func(obj) any { return obj{"action": "decline"} }
	stream := c.openGet(t)
	waitFor(t, func() bool {
		s := b.r.session(c.session)
		return s != nil && s.getStream() != nil
	})
	id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeInput}, 0)
	var statuses []string
	sawElicit := false
	for m := range stream {
		switch m["method"] {
		case "notifications/tasks/status":
			p := sub(m, "params")
			if p["taskId"] != id {
				t.Fatalf("notification for %v", p["taskId"])
			}
			if _, has := p["_meta"]; has {
				t.Fatalf("status notification carries _meta: %v", p)
			}
			statuses = append(statuses, p["status"].(string))
		case "elicitation/create":
			sawElicit = true
		}
		if len(statuses) > 0 && statuses[len(statuses)-1] == "failed" {
			break
		}
	}
	if !sawElicit {
		t.Fatal("no elicitation/create on the GET stream")
	}
	if fmt.Sprint(statuses) != "[input_required working failed]" {
		t.Fatalf("notified statuses %v", statuses)
	}
	res, rerr := c.call("tasks/result", obj{"taskId": id})
	mustOK(t, "tasks/result", res, rerr)
	if res["isError"] != true {
		t.Fatalf("declined input should end in an isError result: %v", res)
	}
}

// waitFor polls cond (bounded) for state the receiver exposes no signal for.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestLegacyTTLAndPollInterval(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2025, 11, 30, 9, 0, 0, 0, time.UTC)}
	b := setup(t, Config{Now: clock.Now, DefaultTTL: time.Minute, MaxTTL: 10 * time.Minute,
		DefaultPollInterval: 250 * time.Millisecond, PurgeInterval: time.Hour})
	c := newLegacy(t, b, "")
	for _, tc := range []struct {
		name      string
		requested int
		want      float64
	}{
		{"no ttl gets the default", 0, 60000},
		{"ttl under the cap is granted", 120000, 120000},
		{"ttl over the cap is capped", 3600000, 600000},
	} {
		_, tk := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, tc.requested)
		if tk["ttl"] != tc.want {
			t.Errorf("%s: ttl %v, want %v", tc.name, tk["ttl"], tc.want)
		}
		if tk["pollInterval"] != 250.0 {
			t.Errorf("%s: pollInterval %v", tc.name, tk["pollInterval"])
		}
	}
	short, _ := c.createTask(ToolWorkOptional, obj{}, 0)
	c.mustCall("tasks/result", "tasks/result", obj{"taskId": short})
	clock.Advance(61 * time.Second)
	e := mustErr(t, "expired tasks/get", second(c.call("tasks/get", obj{"taskId": short})), CodeInvalidParams)
	unknown := mustErr(t, "unknown tasks/get", second(c.call("tasks/get", obj{"taskId": "task_unknown"})), CodeInvalidParams)
	if strings.Replace(e.Message, short, "X", 1) != strings.Replace(unknown.Message, "task_unknown", "X", 1) {
		t.Fatalf("expired %q and unknown %q are worded differently", e.Message, unknown.Message)
	}
	if n := b.r.PurgeExpired(); n != 2 {
		t.Fatalf("purged %d, want 2 (the default-ttl hang and the short task)", n)
	}
	if b.r.History(short) != nil {
		t.Fatal("purged task still held")
	}
	if got := b.r.Counters().TasksPurged; got != 2 {
		t.Fatalf("TasksPurged = %d", got)
	}
}

func TestLegacyPurgeLoopRuns(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	b := setup(t, Config{Now: clock.Now, DefaultTTL: time.Second, PurgeInterval: 5 * time.Millisecond})
	c := newLegacy(t, b, "")
	id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	clock.Advance(2 * time.Second)
	waitFor(t, func() bool { return b.r.History(id) == nil })
}

func TestLegacyTasksListPaginationAndTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Tokens: testTokens, MaxConcurrentTasks: -1})
	a := newLegacy(t, b, "tok-a")
	other := newLegacy(t, b, "tok-b")
	var ids []string
	for range 45 {
		id, _ := a.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
		ids = append(ids, id)
	}
	foreign, _ := other.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	var listed []string
	cursor := ""
	pages := 0
	var firstCursor string
	for {
		p := obj{}
		if cursor != "" {
			p["cursor"] = cursor
		}
		res := a.mustCall("tasks/list", "tasks/list", p)
		pages++
		for _, x := range res["tasks"].([]any) {
			listed = append(listed, x.(obj)["taskId"].(string))
		}
		next, has := res["nextCursor"].(string)
		if !has {
			break
		}
		if firstCursor == "" {
			firstCursor = next
		}
		cursor = next
	}
	if pages != 3 || fmt.Sprint(listed) != fmt.Sprint(ids) {
		t.Fatalf("%d pages listing %d tasks, want 3 pages listing the 45 own tasks in order", pages, len(listed))
	}
	mustErr(t, "bad cursor", second(a.call("tasks/list", obj{"cursor": "garbage"})), CodeInvalidParams)
	mustErr(t, "another tenant's cursor", second(other.call("tasks/list", obj{"cursor": firstCursor})), CodeInvalidParams)
	res := other.mustCall("tasks/list other", "tasks/list", obj{})
	if l := res["tasks"].([]any); len(l) != 1 || l[0].(obj)["taskId"] != foreign {
		t.Fatalf("tenant b lists %v", l)
	}
}

func TestLegacyTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Tokens: testTokens})
	a := newLegacy(t, b, "tok-a")
	support := newLegacy(t, b, "tok-a2")
	other := newLegacy(t, b, "tok-b")
	id, _ := a.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		foreign := mustErr(t, method+" foreign", second(other.call(method, obj{"taskId": id})), CodeInvalidParams)
		unknown := mustErr(t, method+" unknown", second(other.call(method, obj{"taskId": "task_00"})), CodeInvalidParams)
		if strings.Replace(foreign.Message, id, "X", 1) != strings.Replace(unknown.Message, "task_00", "X", 1) {
			t.Fatalf("%s: foreign %q vs unknown %q", method, foreign.Message, unknown.Message)
		}
	}
	support.mustCall("same tenant, other actor", "tasks/get", obj{"taskId": id})
	if st := a.mustCall("owner get", "tasks/get", obj{"taskId": id})["status"]; st != "working" {
		t.Fatalf("foreign cancel changed the task: %v", st)
	}
	// Requests without a token, or with another tenant's token on the session, are refused.
	req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	hijack := &legacyClient{t: t, b: b, token: "tok-b", session: a.session}
	r2, err := hijack.post(context.Background(), obj{"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": obj{"taskId": id}})
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusNotFound {
		t.Fatalf("foreign session: HTTP %d", r2.StatusCode)
	}
}

func TestLegacyConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Tokens: testTokens, MaxConcurrentTasks: 2})
	a := newLegacy(t, b, "tok-a")
	other := newLegacy(t, b, "tok-b")
	first, _ := a.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	a.createTask(ToolWorkOptional, obj{"outcome": OutcomeHang}, 0)
	mustErr(t, "third task", second(a.call("tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"outcome": OutcomeHang}, "task": obj{}})), CodeInternalError)
	other.createTask(ToolWorkOptional, obj{}, 0)
	a.mustCall("cancel", "tasks/cancel", obj{"taskId": first})
	a.createTask(ToolWorkOptional, obj{}, 0)
}

func TestLegacyPlainCallElicitsOnResponseStream(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c := newLegacy(t, b, "")
	c.onRequest = func(obj) any { return obj{"action": "accept", "content": obj{"confirm": true}} }
	res := c.mustCall("confirm_delete", "tools/call", obj{"name": ToolConfirmDelete, "arguments": obj{"filename": "a.txt"}})
	if text := res["content"].([]any)[0].(obj)["text"]; text != "Deleted a.txt" {
		t.Fatalf("result %v", text)
	}
	el := <-c.seen
	if _, has := sub(sub(el, "params"), "_meta")[MetaRelatedTask]; has {
		t.Fatal("a plain call's elicitation must not carry related-task _meta")
	}
}

func TestLegacySSEResponsesKnob(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.r.Knobs().SSEResponses(true)
	c := newLegacy(t, b, "")
	resp, err := c.post(context.Background(), obj{"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(body), `"tools"`) {
		t.Fatalf("content type %q body %q", resp.Header.Get("Content-Type"), body)
	}
	var m obj
	data, _ := strings.CutPrefix(strings.Split(string(body), "\n")[1], "data: ")
	if err := json.Unmarshal([]byte(data), &m); err != nil || m["id"] != 5.0 {
		t.Fatalf("event %q: %v", data, err)
	}
}

// A question sent on a tasks/result whose client went away is asked again at once on another
// tasks/result of the task that was already open (a console replica taking over from one that
// stopped), not only at the task's next change.
func TestLegacyQuestionMovesToAnOpenResultWhenItsStreamCloses(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	c1 := newLegacy(t, b, "")
	id, _ := c1.createTask(ToolWorkOptional, obj{"outcome": OutcomeInput, "idempotency_key": "moves"}, 0)
	waitStatus(t, b.r, id, StatusInputRequired)

	// The first client holds tasks/result and is asked; it never answers.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	resp1, err := c1.post(ctx1, obj{"jsonrpc": "2.0", "id": rpcIDs.Add(1), "method": "tasks/result", "params": obj{"taskId": id}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp1.Body.Close()
	asked := false
	readSSE(resp1.Body, func(m obj) bool {
		asked = m["method"] == "elicitation/create"
		return !asked
	})
	if !asked {
		t.Fatal("the first tasks/result ended without the question")
	}

	// A second client opens tasks/result while the first still holds the question.
	c2 := newLegacy(t, b, "")
	c2.onRequest = func(obj) any { return obj{"action": "accept", "content": obj{"approve": true}} }
	type answer struct {
		res  obj
		rerr *rpcError
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := c2.post(context.Background(), obj{"jsonrpc": "2.0", "id": rpcIDs.Add(1), "method": "tasks/result", "params": obj{"taskId": id}})
		if err != nil {
			done <- answer{rerr: &rpcError{Message: err.Error()}}
			return
		}
		defer resp.Body.Close()
		var out rpcResp
		readSSE(resp.Body, func(m obj) bool {
			if _, isReq := m["method"]; isReq {
				c2.serverMessage(m)
				return true
			}
			b, _ := json.Marshal(m)
			_ = json.Unmarshal(b, &out)
			return false
		})
		done <- answer{out.Result, out.Error}
	}()
	select {
	case <-c2.seen:
		t.Fatal("the question was asked again while the first stream held it")
	case <-time.After(300 * time.Millisecond):
	}

	cancel1() // the first client goes away
	select {
	case a := <-done:
		if a.rerr != nil || a.res["isError"] == true {
			t.Fatalf("the second tasks/result: %v %v", a.res, a.rerr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the question was not asked again on the open tasks/result after the first stream closed")
	}
	checkHistory(t, b.r, id, StatusWorking, StatusInputRequired, StatusWorking, StatusCompleted)
}
