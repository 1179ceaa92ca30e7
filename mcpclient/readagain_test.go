package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

type connKey struct{}

// TestReadAgainSurvivesAConnectionClosedBetweenRequests: the server answers the first request on
// a kept-alive connection, then drops that connection when the second request arrives on it. A
// read is run once more on a fresh connection; a context error or a refusal is not.
func TestReadAgainSurvivesAConnectionClosedBetweenRequests(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Context().Value(connKey{}).(*atomic.Int32).Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if n == 2 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // reset, as a crashed server would
				}
				c.Close()
			}
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int32))
	}
	srv.Start()
	defer srv.Close()
	client := NewHTTPClient(4)
	post := func() (json.RawMessage, error) {
		res, err := client.Post(srv.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			return nil, classifySendError(true, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return b, err
	}
	ctx := context.Background()
	if _, err := readAgain(ctx, post); err != nil {
		t.Fatalf("first read: %v", err)
	}
	calls := 0
	raw, err := readAgain(ctx, func() (json.RawMessage, error) { calls++; return post() })
	if err != nil || string(raw) != `{"ok":true}` || calls != 2 {
		t.Fatalf("read on a dropped connection: %q %v after %d calls", raw, err, calls)
	}

	calls = 0
	refused := &RPCError{Code: -32602, Message: "Task not found"}
	if _, err := readAgain(ctx, func() (json.RawMessage, error) { calls++; return nil, refused }); !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("a refusal was read again: %v after %d calls", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	if _, err := readAgain(cctx, func() (json.RawMessage, error) {
		calls++
		return nil, classifySendError(true, context.Canceled)
	}); err == nil || calls != 1 {
		t.Fatalf("a cancelled read was run again: %v after %d calls", err, calls)
	}
}
