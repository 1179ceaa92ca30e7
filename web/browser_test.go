package web

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// browser starts headless Chromium for t. Without Chromium the test is skipped with a clear
// message, except under CI=true where it fails.
func browser(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (apt-get install chromium); browser tests never skip in CI")
		}
		t.Skip("browser test skipped: chromium is not installed (apt-get install chromium)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	// With many browser tests starting at once on a loaded machine, Chromium now and then exits
	// before it prints its DevTools address; a fresh start with its own profile then succeeds.
	var err2 error
	for attempt := 0; attempt < 3; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		if err2 = chromedp.Do(bctx, chromedp.Navigate("about:blank")); err2 == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancelBrowser)
			return bctx
		}
		cancelBrowser()
		cancelAlloc()
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("start chromium: %v", err2)
	return nil
}

// artifactDir is where screenshots go: $TASKGATE_ARTIFACTS, else web/testdata/artifacts.
func artifactDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("TASKGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		t.Logf("screenshots are saved in %s", abs)
	}
	return dir
}

func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(artifactDir(t), name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// visible reports whether sel matches an element now (no waiting).
func present(t testing.TB, ctx context.Context, sel string) bool {
	t.Helper()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func text(t testing.TB, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestBrowserEachRole signs in as each role in headless Chromium, checks what it sees and may do,
// and saves a screenshot of each main page.
func TestBrowserEachRole(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	lctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	<-audit.Listen(lctx, e.pool, nil, e.srv.Publish)

	for _, role := range []string{"viewer", "operator", "support", "acme-viewer", "admin"} {
		t.Run(role, func(t *testing.T) {
			ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
			defer cancel()
			ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
			defer cancelT()
			u := e.users[role]

			// Anonymous: the overview sends us to sign in.
			if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`))); err != nil {
				t.Fatal(err)
			}
			if role == "viewer" {
				screenshot(t, ctx, "signin")
			}
			if err := chromedp.Do(ctx,
				chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email),
				chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
				chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`)),
			); err != nil {
				t.Fatal(err)
			}
			if got := text(t, ctx, `[data-testid=who-name]`); got != u.Account.Email {
				t.Errorf("signed in as %q", got)
			}
			if got := text(t, ctx, `[data-testid=page-title]`); got != "Overview" {
				t.Errorf("landed on %q", got)
			}
			isAdmin := u.Account.Role == auth.RoleAdmin
			if present(t, ctx, `[data-testid=nav-accounts]`) != isAdmin || present(t, ctx, `[data-testid=nav-tokens]`) != isAdmin {
				t.Errorf("admin navigation shown=%v, want %v", !isAdmin, isAdmin)
			}
			if !present(t, ctx, `[data-testid=nav-audit]`) {
				t.Error("no audit entry in the navigation")
			}
			screenshot(t, ctx, "overview-"+role)

			// The audit log: rows in scope, updating live.
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=nav-audit]`)),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=audit-row]`)),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=live-control]`))); err != nil {
				t.Fatal(err)
			}
			body := text(t, ctx, `#audit-rows`)
			if role == "acme-viewer" && strings.Contains(body, "globex") {
				t.Error("a scoped viewer sees other tenants' audit rows")
			}
			// A change made elsewhere appears without a reload once the stream is up.
			if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`))); err != nil {
				t.Fatal(err)
			}
			tokName := "live-" + role
			if _, _, err := e.auth.CreateToken(context.Background(), audit.Actor{Name: "elsewhere", Kind: audit.KindCLI}, auth.AllTenants,
				tokName, auth.TenantScope("acme")); err != nil {
				t.Fatal(err)
			}
			// The new row is announced, not inserted, until the person asks for it.
			newRow := `Array.from(document.querySelectorAll('tr[data-action="token.create"]')).some(r => r.textContent.includes('` + tokName + `'))`
			if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=live-new-show]`))); err != nil {
				t.Fatalf("live update: %v", err)
			}
			if shown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](newRow)); err != nil || shown {
				t.Errorf("a new audit row was inserted before the person asked (%v)", err)
			}
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=live-new-show]`)),
				chromedp.Poll[chromedp.Void](newRow, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
				t.Fatalf("show the new rows: %v", err)
			}
			screenshot(t, ctx, "audit-"+role)
			// The pause control is a real, keyboard-usable button.
			if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS(`#live-toggle`)), chromedp.KeyEvent("\r"),
				chromedp.WaitVisible(chromedp.CSS(`#live-toggle[aria-pressed=true]`))); err != nil {
				t.Fatalf("pause: %v", err)
			}
			if got := text(t, ctx, `#live-status`); !strings.HasPrefix(got, "Paused") {
				t.Errorf("live status %q after pausing", got)
			}
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#live-toggle`)),
				chromedp.WaitVisible(chromedp.CSS(`#live-toggle[aria-pressed=false]`))); err != nil {
				t.Fatal(err)
			}

			if !isAdmin {
				// The admin pages refuse everyone else, even by address.
				if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/admin/accounts"),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=forbidden]`))); err != nil {
					t.Fatal(err)
				}
			} else {
				// Accounts: add one, see its one-time password once.
				followNav(t, ctx, e.URL, "accounts")
				if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=accounts]`)),
					chromedp.SendKeys(chromedp.CSS(`#acct-email`), "newbie@test"),
					chromedp.SetValue(chromedp.CSS(`#acct-role`), "operator"),
					chromedp.SendKeys(chromedp.CSS(`#acct-tenants`), "acme"),
					chromedp.Submit(chromedp.CSS(`#acct-tenants`)),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=secret]`))); err != nil {
					t.Fatal(err)
				}
				if !present(t, ctx, `[data-testid="account-newbie@test"]`) {
					t.Error("the new account is not listed")
				}
				screenshot(t, ctx, "accounts")
				// Tokens: create one, see it once.
				followNav(t, ctx, e.URL, "tokens")
				if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#token-name`)),
					chromedp.SendKeys(chromedp.CSS(`#token-name`), "shop"),
					chromedp.SendKeys(chromedp.CSS(`#token-tenants`), "acme"),
					chromedp.Submit(chromedp.CSS(`#token-tenants`)),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=secret]`))); err != nil {
					t.Fatal(err)
				}
				if s := text(t, ctx, `[data-testid=secret]`); !strings.HasPrefix(s, "tg_") {
					t.Errorf("token secret %q", s)
				}
				screenshot(t, ctx, "tokens")
				e.findAuditAction(t, "account.create", "admin@test")
				e.findAuditAction(t, "token.create", "admin@test")
				// A narrow screen still shows the navigation and the page.
				if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.URL+"/audit"),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=audit-row]`))); err != nil {
					t.Fatal(err)
				}
				screenshot(t, ctx, "audit-narrow")
			}
			// Sign out: the session ends and pages ask for sign-in again. On the narrow screen
			// (the admin's last pages) the account is in the header's menu.
			signout := []chromedp.Action[chromedp.Void]{chromedp.Navigate(e.URL + "/"), chromedp.Click(chromedp.CSS(`[data-testid=signout]`))}
			if isAdmin {
				signout = []chromedp.Action[chromedp.Void]{chromedp.Navigate(e.URL + "/"), chromedp.Click(chromedp.CSS(`[data-testid=menu-open]`)),
					chromedp.WaitVisible(chromedp.CSS(`[data-testid=menu-audit]`)), chromedp.Click(chromedp.CSS(`[data-testid=menu-signout]`))}
			}
			if err := chromedp.Do(ctx, signout...); err != nil {
				t.Fatal(err)
			}
			if err := chromedp.Do(ctx,
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
				chromedp.Navigate(e.URL+"/audit"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`))); err != nil {
				t.Fatal(err)
			}
			e.findAuditAction(t, "auth.signout", u.Account.Email)
		})
	}
}

// findAuditAction fails t unless the audit log holds action by actor.
func (e *testEnv) findAuditAction(t testing.TB, action, actor string) {
	t.Helper()
	for _, r := range e.auditRows(t) {
		if r.Action == action && r.Actor == actor {
			return
		}
	}
	t.Errorf("no audit row %s by %s", action, actor)
}

// followNav opens the page a header link points to and waits for it to load. Following the link
// by a click lets the next query land in the document being replaced, whose nodes then vanish.
func followNav(t *testing.T, ctx context.Context, base, section string) {
	t.Helper()
	link, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid=nav-`+section+`]`), "href"))
	href := link.Value
	if err != nil || !link.Exists || !strings.HasPrefix(href, "/") {
		t.Fatalf("the header has no link to %s: %q %v", section, href, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+href)); err != nil {
		t.Fatalf("open %s: %v", href, err)
	}
}
