package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/internal/opstest"
)

// A person signs in in Chromium by typing a password and answers a server's two questions in
// the operation page's form with marker values; every page the browser then renders (its whole
// DOM) holds neither the password, the session cookie, the answers nor an API token.
func TestBrowserPagesHoldNoSecret(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	b := opstest.Setup(t, opstest.Options{Pool: e.pool, Era: "legacy", Extra: `
  - {name: questions, server: rcv, tool: multi_input, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     max_ttl: 15m, owners: [ops]}
`})
	e.srv.deps.Operations, e.srv.deps.Policy = b.Ops, b.Policy
	ops := &opsEnv{testEnv: e, b: b}
	id := ops.start(t, "acme", "questions", "browser-secrets", `{}`)
	_, passes := b.Watcher(t, "browser-secrets", nil)

	mk := func() string {
		x := make([]byte, 8)
		_, _ = rand.Read(x)
		return "mkanswer" + hex.EncodeToString(x)
	}
	secrets := map[string]string{"acme API token": e.tokens["acme-token"], "globex API token": e.tokens["globex-token"]}
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 120*time.Second)
	defer cancelT()
	u := e.users["operator"]
	secrets["password"] = u.Password
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies.Cookies {
		if c.Name == SessionCookie {
			secrets["session cookie"] = c.Value
		}
	}
	if secrets["session cookie"] == "" {
		t.Fatal("no session cookie in the browser")
	}
	for i := range 2 { // multi_input asks two questions, one after the other
		opstest.WaitFor(t, passes, 20*time.Second, fmt.Sprintf("question %d", i+1), func() bool {
			n := 0
			_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pending_inputs WHERE operation_id = $1 AND state = 'open'`, id).Scan(&n)
			return n > 0
		})
		answer := mk()
		secrets[fmt.Sprintf("answer %d", i+1)] = answer
		if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/operations/"+id), chromedp.WaitVisible(chromedp.CSS(`[data-testid=input-form] input[type=text]`)),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=input-form] input[type=text]`), answer)); err != nil {
			t.Fatalf("answer question %d: %v", i+1, err)
		}
		// The answer is a form post answered with a redirect: wait for the page it leads to,
		// so the next navigation does not race the one the post started (net::ERR_ABORTED).
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`[data-testid=input-accept]`))); err != nil {
			t.Fatalf("send answer %d: %v", i+1, err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
			t.Fatalf("page after answer %d: %v", i+1, err)
		}
		opstest.WaitFor(t, passes, 20*time.Second, fmt.Sprintf("answer %d accepted", i+1), func() bool {
			n := 0
			_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pending_inputs WHERE operation_id = $1 AND state = 'answered'`, id).Scan(&n)
			return n > i
		})
	}
	opstest.WaitFor(t, passes, 20*time.Second, "completed", func() bool { return b.Detail(t, id).Envelope != nil })

	paths := []string{"/", "/inbox", "/operations", "/operations/" + id, "/reconcile", "/audit", "/servers", "/workflows", "/account/password"}
	for _, p := range paths {
		if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+p), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		dom, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if err != nil {
			t.Fatal(err)
		}
		if p == "/operations/"+id && !strings.Contains(dom, id) {
			t.Fatal("the operation page does not show the operation: the scan proves nothing")
		}
		for what, s := range secrets {
			if len(s) < 12 {
				t.Fatalf("%s is too short to scan for", what)
			}
			if strings.Contains(dom, s) {
				t.Errorf("the %s is in the page %s", what, p)
			}
		}
	}
	t.Logf("%d secrets scanned for in %d pages rendered by Chromium", len(secrets), len(paths))
}
