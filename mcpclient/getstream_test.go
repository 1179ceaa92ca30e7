package mcpclient_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// TestLegacyDialOpensTheGetStreamFirst: by the time Dial returns, the
// server has the standalone GET stream, so a server request sent right after
// the first call has somewhere to go.
func TestLegacyDialOpensTheGetStreamFirst(t *testing.T) {
	t.Parallel()
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasLegacy})
	t.Cleanup(rcv.Close)
	var getAt, listAt atomic.Int64
	h := rcv.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Mcp-Session-Id") != "" {
			getAt.CompareAndSwap(0, time.Now().UnixNano())
		}
		h.ServeHTTP(w, r)
		if r.Method == http.MethodPost && rcv.Counters().Methods["tools/list"] > 0 {
			listAt.CompareAndSwap(0, time.Now().UnixNano())
		}
	}))
	t.Cleanup(srv.Close)
	conn, err := mcpclient.Dial(ctxT(t, 10*time.Second), mcpclient.Options{URL: srv.URL + "/mcp", Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	g := getAt.Load()
	if g == 0 {
		t.Fatal("Dial returned before the server saw the GET stream")
	}
	// The first request after initialize (tools/list) follows the GET.
	if l := listAt.Load(); l == 0 || l < g {
		t.Errorf("tools/list answered before the GET stream was opened")
	}
	if n := rcv.Counters().Methods["tools/list"]; n != 1 {
		t.Errorf("tools/list sent %d times", n)
	}
}
