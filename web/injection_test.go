package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/receiver"
)

// Prompt-injection text a server puts in its status messages and results (a script tag,
// bidirectional overrides, instructions) is stored as data without its control characters and
// shown escaped: the operation page carries no live markup and no override.
func TestInjectionTextFromAServerIsStoredAndShownInert(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t)
			b := opstest.Setup(t, opstest.Options{Pool: e.pool, Era: era, Receiver: receiver.Config{Hostile: []receiver.Hostile{receiver.HostileMarkup}}})
			e.srv.deps.Operations, e.srv.deps.Policy = b.Ops, b.Policy
			ops := &opsEnv{testEnv: e, b: b}
			id := ops.start(t, "acme", "refund", "inj-"+era, `{"duration_ms": 100}`)
			_, passes := b.Watcher(t, "inj-"+era, nil)
			opstest.WaitFor(t, passes, 15*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
			if b.Receiver.HostileHits()[receiver.HostileMarkup] == 0 {
				t.Fatal("the receiver injected nothing: the test proves nothing")
			}
			var msg string
			if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(status_message, '') FROM tasks WHERE operation_id = $1`, id).Scan(&msg); err != nil {
				t.Fatal(err)
			}
			env := b.Detail(t, id).Envelope
			for what, s := range map[string]string{"status message": msg, "result preview": env.Preview, "envelope status message": env.StatusMessage} {
				if strings.ContainsAny(s, "\u202e\u202c\u2066\u2069") {
					t.Errorf("stored %s keeps bidirectional controls: %q", what, s)
				}
			}
			if !strings.Contains(env.Preview, "ignore all previous instructions") {
				t.Errorf("result preview %q: the server's text is not kept as data", env.Preview)
			}
			res, body := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("operation page: %d", res.StatusCode)
			}
			if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.ContainsAny(body, "\u202e\u2066") {
				t.Fatalf("the operation page shows the server's text live:\n%s", body)
			}
			if !strings.Contains(body, "&lt;script&gt;") {
				t.Fatalf("the server's text is not on the page as escaped data")
			}
		})
	}
}
