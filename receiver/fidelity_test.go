package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawPost sends body to /mcp with the given headers and returns the status
// and the decoded JSON-RPC error, if any.
func rawPost(t *testing.T, b *bundle, body string, h map[string]string) (int, *rpcError) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out rpcResp
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out.Error
}

func TestDNSRebindingGuard(t *testing.T) {
	t.Parallel()
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	discoverBody := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	modernHeaders := func(h map[string]string) map[string]string {
		h["MCP-Protocol-Version"] = VersionExtension
		h["Mcp-Method"] = "server/discover"
		return h
	}
	b := setup(t, Config{})
	port := b.srv.Listener.Addr().String()[strings.LastIndexByte(b.srv.Listener.Addr().String(), ':'):]
	for _, tc := range []struct {
		name string
		h    map[string]string
		want int
	}{
		{"loopback host", map[string]string{}, http.StatusOK},
		{"localhost host and origin", map[string]string{"Host": "localhost" + port, "Origin": "http://localhost" + port}, http.StatusOK},
		{"ipv6 loopback", map[string]string{"Host": "[::1]" + port, "Origin": "http://[::1]" + port}, http.StatusOK},
		{"foreign host with matching origin", map[string]string{"Host": "evil.example.com", "Origin": "http://evil.example.com"}, http.StatusForbidden},
		{"foreign host", map[string]string{"Host": "evil.example.com" + port}, http.StatusForbidden},
		{"loopback host, foreign origin", map[string]string{"Origin": "http://evil.example.com"}, http.StatusForbidden},
		{"null origin", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"loopback-looking suffix", map[string]string{"Host": "localhost.evil.example.com"}, http.StatusForbidden},
	} {
		for era, body := range map[string]string{"legacy": initBody, "extension": discoverBody} {
			h := map[string]string{}
			for k, v := range tc.h {
				h[k] = v
			}
			if era == "extension" {
				h = modernHeaders(h)
			}
			status, rerr := rawPost(t, b, body, h)
			if status != tc.want {
				t.Errorf("%s (%s): HTTP %d, want %d", tc.name, era, status, tc.want)
			}
			if tc.want == http.StatusForbidden && (rerr == nil || !strings.Contains(rerr.Message, "not allowed")) {
				t.Errorf("%s (%s): error %v, want a Forbidden JSON-RPC error", tc.name, era, rerr)
			}
		}
	}
	// A configured allow-list replaces the loopback default.
	c := setup(t, Config{AllowedHosts: []string{"receiver.internal"}})
	if status, _ := rawPost(t, c, initBody, map[string]string{"Host": "receiver.internal:8090", "Origin": "https://receiver.internal"}); status != http.StatusOK {
		t.Errorf("configured host: HTTP %d", status)
	}
	if status, _ := rawPost(t, c, initBody, nil); status != http.StatusForbidden {
		t.Errorf("loopback host with a configured allow-list: HTTP %d, want 403", status)
	}
}

func TestExtensionPingIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Eras: ErasExtension})
	status, _, rerr := modernCall(t, b, "ping", nil, modernOpts{})
	if status != http.StatusNotFound || rerr == nil || rerr.Code != CodeMethodNotFound {
		t.Fatalf("ping in %s: HTTP %d, error %v; want 404 and %d", VersionExtension, status, rerr, CodeMethodNotFound)
	}
	// The legacy era keeps ping.
	l := setup(t, Config{Eras: ErasLegacy})
	c := newLegacy(t, l, "")
	c.mustCall("legacy ping", "ping", obj{})
}

// TestLegacyNoElicitationCapability: a session that declared no elicitation
// capability is never sent elicitation/create, on a plain call or a task.
func TestLegacyNoElicitationCapability(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Eras: ErasLegacy})
	c := &legacyClient{t: t, b: b, seen: make(chan obj, 16)}
	c.mustCall("initialize", "initialize", obj{"protocolVersion": VersionLegacy, "capabilities": obj{}, "clientInfo": obj{"name": "t", "version": "1"}})
	c.notify("notifications/initialized", obj{})
	c.onRequest = func(m obj) any { return obj{"action": "accept", "content": obj{"approve": true}} }

	_, rerr := c.call("tools/call", obj{"name": ToolWorkOptional, "arguments": obj{"outcome": OutcomeInput}})
	mustErr(t, "plain call needing input", rerr, CodeMissingCapability)

	id, _ := c.createTask(ToolWorkOptional, obj{"outcome": OutcomeInput}, 60000)
	waitStatus(t, b.r, id, StatusFailed)
	_, rerr = c.call("tasks/result", obj{"taskId": id})
	mustErr(t, "tasks/result of a task needing input", rerr, CodeMissingCapability)
	checkHistory(t, b.r, id, StatusWorking, StatusFailed)
	select {
	case m := <-c.seen:
		t.Fatalf("the server sent %v to a client without the elicitation capability", m["method"])
	default:
	}
	// With the capability declared the same task asks for input.
	d := newLegacy(t, b, "")
	id2, _ := d.createTask(ToolWorkOptional, obj{"outcome": OutcomeInput}, 60000)
	waitStatus(t, b.r, id2, StatusInputRequired)
}

// TestExtensionNoElicitationCapability: a task created by a request that
// declared no elicitation capability never offers inputRequests.
func TestExtensionNoElicitationCapability(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Eras: ErasExtension})
	noElicit := modernOpts{caps: obj{"extensions": obj{ExtensionTasks: obj{}}}}
	_, res, rerr := modernCall(t, b, "tools/call", obj{"name": ToolWorkRequired, "arguments": obj{"outcome": OutcomeInput}}, noElicit)
	mustOK(t, "create", res, rerr)
	id := str(res, "taskId")
	waitStatus(t, b.r, id, StatusFailed)
	g := getTask(t, b, id, noElicit)
	if _, has := g["inputRequests"]; has {
		t.Fatalf("tasks/get offered inputRequests to a client without elicitation: %v", g)
	}
	if e, _ := g["error"].(obj); e == nil || e["code"] != float64(CodeMissingCapability) {
		t.Fatalf("task error = %v, want %d", g["error"], CodeMissingCapability)
	}
	checkHistory(t, b.r, id, StatusWorking, StatusFailed)

	_, res, rerr = modernCall(t, b, "tools/call", obj{"name": ToolWorkRequired, "arguments": obj{"outcome": OutcomeInput}}, modernOpts{})
	mustOK(t, "create with elicitation", res, rerr)
	waitStatus(t, b.r, str(res, "taskId"), StatusInputRequired)
}
