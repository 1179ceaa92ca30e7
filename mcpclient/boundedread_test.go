package mcpclient_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// hugeResult is the size of the result the bounded-read server sends.
const hugeResult = 64 << 20

// writeHuge writes a JSON-RPC response to id whose text is hugeResult bytes, in chunks, so the
// server side holds no more than one chunk.
func writeHuge(w io.Writer, id json.RawMessage) {
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	chunk := []byte(strings.Repeat("a", 32<<10))
	for n := 0; n < hugeResult; n += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
	fmt.Fprint(w, `"}]}}`)
}

// boundedServer is a 2025-11-25 server whose answer to hugeMethod is a 64 MB result, as JSON
// or as one SSE event.
func boundedServer(t *testing.T, hugeMethod string, sse bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch {
		case m.Method == hugeMethod && sse:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: ")
			writeHuge(w, m.ID)
			fmt.Fprint(w, "\n\n")
		case m.Method == hugeMethod:
			w.Header().Set("Content-Type", "application/json")
			writeHuge(w, m.ID)
		case m.Method == "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"huge","version":"1"}}}`, m.ID)
		case m.Method == "tools/list":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}}`, m.ID)
		case m.Method == "":
			w.WriteHeader(http.StatusAccepted)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// heapRise runs f and returns how many bytes the heap had to take during it (every
// allocation, whether or not collected since: a bound on how far the heap rose, and the same
// figure on every run) and the highest rise of the heap in use, sampled every 100µs.
func heapRise(f func()) (allocated, peak uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, allocBase := ms.HeapInuse, ms.TotalAlloc
	top := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var s runtime.MemStats
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&s)
			top = max(top, s.HeapInuse)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc - allocBase, top - base
}

// Every byte of a 2025-11-25 answer passes the size cap before it is decoded: a 64 MB result
// of tools/call (JSON or SSE), tasks/result, tasks/cancel or tools/list raises the heap by no
// more than the cap plus a small constant, and is refused as too large. Not parallel: the
// heap is measured while no other test of the package runs.
func TestLegacyHugeAnswersRaiseTheHeapByNoMoreThanTheCap(t *testing.T) {
	lim := mcpclient.Limits{MaxResult: 1 << 20} // MaxMessage: 1 MiB + 64 KiB
	const slack = 512 << 10                     // bufio, copy buffers, the HTTP stack, the dial
	capBytes := uint64(lim.MaxResult + 64<<10)
	for _, tc := range []struct {
		method string
		sse    bool
		call   func(c mcpclient.Conn) error
	}{
		{"tools/call", false, func(c mcpclient.Conn) error {
			_, err := c.CallTool(t.Context(), "big", nil, mcpclient.CallOptions{})
			return err
		}},
		{"tools/call", true, func(c mcpclient.Conn) error {
			_, err := c.CallTool(t.Context(), "big", nil, mcpclient.CallOptions{})
			return err
		}},
		{"tasks/result", true, func(c mcpclient.Conn) error { _, err := c.AwaitOutcome(t.Context(), "t1"); return err }},
		{"tasks/cancel", false, func(c mcpclient.Conn) error { _, err := c.CancelTask(t.Context(), "t1"); return err }},
		{"tools/list", false, nil},
	} {
		name := tc.method
		if tc.sse {
			name += " as SSE"
		}
		url := boundedServer(t, tc.method, tc.sse)
		var callErr error
		var rise, peak uint64
		if tc.method == "tools/list" { // read while dialling
			rise, peak = heapRise(func() {
				var conn mcpclient.Conn
				if conn, callErr = mcpclient.Dial(t.Context(), mcpclient.Options{URL: url, Era: mcpclient.EraChoiceLegacy, Limits: lim}); callErr == nil {
					_ = conn.Close()
				}
			})
		} else {
			conn, err := mcpclient.Dial(t.Context(), mcpclient.Options{URL: url, Era: mcpclient.EraChoiceLegacy, Limits: lim})
			if err != nil {
				t.Fatalf("%s: dial: %v", name, err)
			}
			rise, peak = heapRise(func() { callErr = tc.call(conn) })
			_ = conn.Close()
		}
		if !errors.Is(callErr, mcpclient.ErrResultTooLarge) {
			t.Errorf("%s: %v, want the answer refused as too large", name, callErr)
		}
		t.Logf("%s: a %d MiB answer allocated %.2f MiB, heap in use rose at most %.2f MiB (cap %.2f MiB)", name, hugeResult>>20,
			float64(rise)/(1<<20), float64(peak)/(1<<20), float64(capBytes)/(1<<20))
		if rise > capBytes+slack {
			t.Errorf("%s: %d bytes allocated, more than the cap %d plus %d", name, rise, capBytes, slack)
		}
	}
}

// A stdio server's line over the size cap ends the connection before it is decoded: a 64 MB
// line allocates no more than twice the cap plus a small constant (mcp-go's line reader copies
// what it collected once more when the read fails). Not parallel (heap measured).
func TestStdioHugeLineRaisesTheHeapByNoMoreThanTheCap(t *testing.T) {
	lim := mcpclient.Limits{MaxResult: 1 << 20}
	capBytes := uint64(lim.MaxResult + 64<<10)
	const slack = 512 << 10
	script := fmt.Sprintf(`read line; head -c %d /dev/zero | tr '\0' a; echo`, hugeResult)
	var err error
	rise, peak := heapRise(func() {
		var conn mcpclient.Conn
		conn, err = mcpclient.Dial(t.Context(), mcpclient.Options{Command: "sh", Args: []string{"-c", script}, Era: mcpclient.EraChoiceLegacy, Limits: lim})
		if err == nil {
			_ = conn.Close()
		}
	})
	if !errors.Is(err, mcpclient.ErrResultTooLarge) {
		t.Fatalf("dial: %v, want the line refused as too large", err)
	}
	t.Logf("a %d MiB line allocated %.2f MiB, heap in use rose at most %.2f MiB (cap %.2f MiB)", hugeResult>>20,
		float64(rise)/(1<<20), float64(peak)/(1<<20), float64(capBytes)/(1<<20))
	if rise > 2*capBytes+slack {
		t.Fatalf("%d bytes allocated, more than twice the cap %d plus %d", rise, capBytes, slack)
	}
}
