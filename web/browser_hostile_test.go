package web

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

// A hostile receiver (markup mode: a script tag, an img with onerror, bidirectional overrides
// and instruction text in every text field) is probed and runs a Task; its operation, servers
// and manifest pages, opened in Chromium, run none of it: no dialog opens, no such element
// exists, the text reads as text without its overrides. Screenshots are saved as artifacts.
func TestBrowserHostileTextIsInert(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	b := opstest.Setup(t, opstest.Options{Pool: e.pool, Era: "legacy", Receiver: receiver.Config{Hostile: []receiver.Hostile{receiver.HostileMarkup}}})
	ctx := context.Background()
	mstore := manifests.NewStore(e.pool)
	prober, err := manifests.NewProber(manifests.ProberConfig{Policy: b.Policy, Store: mstore})
	if err != nil {
		t.Fatal(err)
	}
	if err := prober.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prober.Stop)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := mstore.Status(ctx, "rcv"); err == nil && st.Latest != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hostile receiver was not probed within 30s")
		}
	}
	flags, err := killswitch.Open(ctx, e.pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(flags.Close)
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: b.Policy, Manifests: mstore, Stages: rollout.NewStore(e.pool, b.Policy), KillSwitch: flags})
	if err != nil {
		t.Fatal(err)
	}
	deps := e.srv.deps
	deps.Policy, deps.Operations, deps.Manifests, deps.Prober, deps.Router, deps.Flags = b.Policy, b.Ops, mstore, prober, router, flags
	deps.Registry = prometheus.NewRegistry()
	srv, err := NewServer(deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.CloseStreams)

	id := b.Start(t, "refund", "hostile-browser", `{"duration_ms": 100}`).Response.OperationID
	_, passes := b.Watcher(t, "hostile-browser", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
	if b.Receiver.HostileHits()[receiver.HostileMarkup] == 0 {
		t.Fatal("the receiver injected nothing: the test proves nothing")
	}

	bc, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	bc, cancelT := context.WithTimeout(bc, 120*time.Second)
	defer cancelT()
	var dialogs atomic.Int32
	if err := chromedp.Listen(bc, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			go func() { _, _ = chromedp.Call(bc, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{}) }()
		}
	}); err != nil {
		t.Fatal(err)
	}
	const live = `[...document.querySelectorAll('script')].some(s => s.textContent.includes("alert('taskgate')")) ||
		document.querySelector('img[src="x"], [onerror]') !== null`
	// The detectors work: the same markup served as HTML opens a dialog and is found live.
	if err := chromedp.Do(bc, chromedp.Navigate("data:text/html,"+strings.ReplaceAll(receiver.HostileMarkupText, "#", "%23"))); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); dialogs.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if ran, err := chromedp.Run(bc, chromedp.Evaluate[bool](live)); err != nil || !ran || dialogs.Load() == 0 {
		t.Fatalf("the markup served as HTML went unnoticed (live %v, %d dialogs, %v)", ran, dialogs.Load(), err)
	}
	time.Sleep(300 * time.Millisecond) // the img's onerror dialog too
	dialogs.Store(0)
	u := e.users["viewer"]
	if err := chromedp.Do(bc, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	shown := 0
	for name, path := range map[string]string{"hostile-operation": "/operations/" + id, "hostile-servers": "/servers",
		"hostile-manifests": "/servers/rcv/manifests"} {
		if err := chromedp.Do(bc, chromedp.Navigate(ts.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		time.Sleep(300 * time.Millisecond) // an onerror or inline script would have run by now
		if ran, err := chromedp.Run(bc, chromedp.Evaluate[bool](live)); err != nil || ran {
			t.Errorf("%s: the server's markup is live in the page (%v)", path, err)
		}
		txt, err := chromedp.Run(bc, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(txt, "\u202e\u202c\u2066\u2069") {
			t.Errorf("%s shows the server's bidirectional overrides", path)
		}
		if strings.Contains(txt, "<script>alert('taskgate')</script>") {
			shown++
			t.Logf("%s shows the server's markup as text", path)
		}
		if path == "/operations/"+id && !strings.Contains(txt, "ignore all previous instructions") {
			t.Errorf("the operation page does not show the server's text as data")
		}
		screenshot(t, bc, name)
	}
	if shown == 0 {
		t.Error("no page shows the server's markup as text: the test proves nothing")
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened: the server's script ran", n)
	}
}
