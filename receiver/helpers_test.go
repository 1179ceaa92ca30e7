package receiver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one receiver served over real HTTP on 127.0.0.1.
type bundle struct {
	r   *Receiver
	srv *httptest.Server
	url string
}

var testTokens = map[string]Identity{
	"tok-a":  {Tenant: "tenant-a", Actor: "app"},
	"tok-a2": {Tenant: "tenant-a", Actor: "support"},
	"tok-b":  {Tenant: "tenant-b", Actor: "app"},
}

func setup(t testing.TB, cfg Config) *bundle {
	t.Helper()
	r := New(cfg)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		r.Close()
	})
	return &bundle{r: r, srv: srv, url: srv.URL}
}

var rpcIDs atomic.Int64

// rpcResp is a decoded JSON-RPC response.
type rpcResp struct {
	Result obj       `json:"result"`
	Error  *rpcError `json:"error"`
}

// legacyClient speaks raw 2025-11-25 JSON-RPC over Streamable HTTP.
type legacyClient struct {
	t       testing.TB
	b       *bundle
	token   string
	session string
	// onRequest answers server→client requests seen on any stream.
	onRequest func(m obj) any
	seen      chan obj // server requests seen (buffered)
}

func newLegacy(t testing.TB, b *bundle, token string) *legacyClient {
	t.Helper()
	c := &legacyClient{t: t, b: b, token: token, seen: make(chan obj, 16)}
	res, rerr := c.call("initialize", obj{"protocolVersion": VersionLegacy, "capabilities": obj{"elicitation": obj{}}, "clientInfo": obj{"name": "test", "version": "1"}})
	if rerr != nil {
		t.Fatalf("initialize: %v", rerr)
	}
	if res["protocolVersion"] != VersionLegacy {
		t.Fatalf("negotiated %v", res["protocolVersion"])
	}
	c.notify("notifications/initialized", obj{})
	return c
}

func (c *legacyClient) headers(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.session != "" {
		h.Set("Mcp-Session-Id", c.session)
		h.Set("MCP-Protocol-Version", VersionLegacy)
	}
}

func (c *legacyClient) post(ctx context.Context, msg any) (*http.Response, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.b.url+"/mcp", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	c.headers(req.Header)
	return http.DefaultClient.Do(req)
}

func (c *legacyClient) notify(method string, params any) {
	c.t.Helper()
	resp, err := c.post(context.Background(), notification(method, params))
	if err != nil {
		c.t.Fatalf("notify %s: %v", method, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notify %s: HTTP %d", method, resp.StatusCode)
	}
}

// call sends a request and reads its response, JSON or SSE.
func (c *legacyClient) call(method string, params any) (obj, *rpcError) {
	c.t.Helper()
	return c.callCtx(context.Background(), method, params)
}

func (c *legacyClient) callCtx(ctx context.Context, method string, params any) (obj, *rpcError) {
	c.t.Helper()
	id := rpcIDs.Add(1)
	resp, err := c.post(ctx, obj{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.session = sid
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var out rpcResp
		found := false
		readSSE(resp.Body, func(m obj) bool {
			if _, isReq := m["method"]; isReq {
				c.serverMessage(m)
				return true
			}
			b, _ := json.Marshal(m)
			_ = json.Unmarshal(b, &out)
			found = true
			return false
		})
		if !found {
			c.t.Fatalf("%s: SSE stream ended without a response", method)
		}
		return out.Result, out.Error
	}
	var out rpcResp
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		c.t.Fatalf("%s: decode: %v", method, err)
	}
	return out.Result, out.Error
}

// serverMessage handles a server request or notification from any stream.
func (c *legacyClient) serverMessage(m obj) {
	if _, hasID := m["id"]; !hasID {
		return
	}
	select {
	case c.seen <- m:
	default:
	}
	if c.onRequest == nil {
		return
	}
	answer := c.onRequest(m)
	go func() {
		resp, err := c.post(context.Background(), obj{"jsonrpc": "2.0", "id": m["id"], "result": answer})
		if err == nil {
			resp.Body.Close()
		}
	}()
}

// readSSE calls f for each JSON event until f returns false or the stream ends.
func readSSE(r io.Reader, f func(obj) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, found := strings.CutPrefix(sc.Text(), "data: ")
		if !found {
			continue
		}
		var m obj
		if json.Unmarshal([]byte(data), &m) != nil {
			continue
		}
		if !f(m) {
			return
		}
	}
}

// openGet opens the session's GET stream and delivers its messages on a channel.
func (c *legacyClient) openGet(t testing.TB) <-chan obj {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.b.url+"/mcp", nil)
	c.headers(req.Header)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET stream: HTTP %d", resp.StatusCode)
	}
	ch := make(chan obj, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		readSSE(resp.Body, func(m obj) bool {
			if _, isReq := m["method"]; isReq {
				if _, hasID := m["id"]; hasID {
					c.serverMessage(m)
				}
			}
			ch <- m
			return true
		})
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	// The stream is registered once the headers arrived; wait until the
	// receiver holds it so no notification is missed.
	return ch
}

func mustOK(t testing.TB, what string, res obj, rerr *rpcError) obj {
	t.Helper()
	if rerr != nil {
		t.Fatalf("%s: unexpected error %d %q", what, rerr.Code, rerr.Message)
	}
	return res
}

func mustErr(t testing.TB, what string, rerr *rpcError, code int) *rpcError {
	t.Helper()
	if rerr == nil {
		t.Fatalf("%s: want error %d, got a result", what, code)
	}
	if rerr.Code != code {
		t.Fatalf("%s: want error %d, got %d %q", what, code, rerr.Code, rerr.Message)
	}
	return rerr
}

// createTask makes a task-augmented call and returns the task id.
func (c *legacyClient) createTask(tool string, args obj, ttl int) (string, obj) {
	c.t.Helper()
	task := obj{}
	if ttl > 0 {
		task["ttl"] = ttl
	}
	res, rerr := c.call("tools/call", obj{"name": tool, "arguments": args, "task": task})
	mustOK(c.t, "tools/call "+tool, res, rerr)
	tk, _ := res["task"].(obj)
	id, _ := tk["taskId"].(string)
	if id == "" {
		c.t.Fatalf("tools/call %s: no task in %v", tool, res)
	}
	return id, tk
}

// waitStatus waits (by the task's change signal) until the receiver holds the
// task in one of the statuses.
func waitStatus(t testing.TB, r *Receiver, id string, want ...Status) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		r.tasks.mu.Lock()
		tk := r.tasks.tasks[id]
		if tk == nil {
			r.tasks.mu.Unlock()
			t.Fatalf("task %s not held", id)
		}
		st, ch := tk.status, tk.changed
		r.tasks.mu.Unlock()
		for _, w := range want {
			if st == w {
				return st
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("task %s: still %s, want %v", id, st, want)
		}
	}
}

// checkHistory asserts every transition of the task was valid.
func checkHistory(t testing.TB, r *Receiver, id string, want ...Status) {
	t.Helper()
	h := r.History(id)
	for i := 1; i < len(h); i++ {
		if !ValidTransition(h[i-1], h[i]) {
			t.Fatalf("task %s: invalid transition %s → %s in %v", id, h[i-1], h[i], h)
		}
	}
	if want != nil && fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("task %s: history %v, want %v", id, h, want)
	}
	if n := r.Counters().InvalidTransitions; n != 0 {
		t.Fatalf("%d invalid transitions refused", n)
	}
}

// modernCall sends one 2026-07-28 request with the standard headers; opts may
// change them.
type modernOpts struct {
	noDeclare bool
	caps      obj
	headers   map[string]string
	token     string
	version   string
}

func modernCall(t testing.TB, b *bundle, method string, params obj, o modernOpts) (int, obj, *rpcError) {
	t.Helper()
	if params == nil {
		params = obj{}
	}
	caps := o.caps
	if caps == nil {
		caps = obj{"elicitation": obj{}}
		if !o.noDeclare {
			caps["extensions"] = obj{ExtensionTasks: obj{}}
		}
	}
	v := o.version
	if v == "" {
		v = VersionExtension
	}
	params["_meta"] = obj{MetaProtocolVersion: v, MetaClientCapabilities: caps}
	body, _ := json.Marshal(obj{"jsonrpc": "2.0", "id": rpcIDs.Add(1), "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", v)
	req.Header.Set("Mcp-Method", method)
	if n := str(params, "name"); n != "" {
		req.Header.Set("Mcp-Name", n)
	}
	if n := str(params, "taskId"); n != "" {
		req.Header.Set("Mcp-Name", n)
	}
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
	for k, v := range o.headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	var out rpcResp
	raw, _ := io.ReadAll(resp.Body)
	if len(bytes.TrimSpace(raw)) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: HTTP %d: decode %q: %v", method, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, out.Result, out.Error
}

// mustCall sends a request that must succeed.
func (c *legacyClient) mustCall(what, method string, params any) obj {
	c.t.Helper()
	res, rerr := c.call(method, params)
	return mustOK(c.t, what, res, rerr)
}
