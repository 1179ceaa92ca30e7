package mcpclient_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// A 2025-11-25 server may end a response stream after an event id, before the response: the
// client waits the retry time it asked for and reads the rest from a GET with Last-Event-ID.
func TestLegacyResponseStreamIsResumedAfterTheRetryTime(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var closedAt time.Time
	var resumedAfter time.Duration
	var lastEventID string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if r.Header.Get("Last-Event-ID") == "" {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			mu.Lock()
			resumedAfter, lastEventID = time.Since(closedAt), r.Header.Get("Last-Event-ID")
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: e2\ndata: %s\n\n", `{"jsonrpc":"2.0","id":"tg-3","result":{"content":[{"type":"text","text":"resumed"}]}}`)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch m.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"resumer","version":"1"}}}`, m.ID)
		case "tools/list":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"slow","inputSchema":{"type":"object"}}]}}`, m.ID)
		case "tools/call":
			if string(m.ID) != `"tg-3"` {
				t.Errorf("tools/call id %s", m.ID)
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "id: e1\nretry: 300\ndata:\n\n")
			w.(http.Flusher).Flush()
			mu.Lock()
			closedAt = time.Now()
			mu.Unlock()
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := ctxT(t, 10*time.Second)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: srv.URL, Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	res, err := conn.CallTool(ctx, "slow", nil, mcpclient.CallOptions{})
	if err != nil || len(res.Texts()) != 1 || res.Texts()[0] != "resumed" {
		t.Fatalf("result %+v %v, want the resumed stream's response", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if lastEventID != "e1" || resumedAfter < 300*time.Millisecond {
		t.Fatalf("resumed with Last-Event-ID %q after %v, want e1 after the 300ms retry", lastEventID, resumedAfter)
	}
}
