package web

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/reconcile"
)

// selectsChooseNothing fails the test for every <select> in seg whose first option is not an
// empty "choose…" or that marks any option with a value as selected, and for every radio button
// or checkbox checked in advance.
func selectsChooseNothing(t *testing.T, where, seg string) int {
	t.Helper()
	selects := regexp.MustCompile(`(?s)<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>`).FindAllStringSubmatch(seg, -1)
	for _, m := range selects {
		opts := regexp.MustCompile(`<option value="([^"]*)"( selected)?>`).FindAllStringSubmatch(m[2], -1)
		if len(opts) == 0 || opts[0][1] != "" {
			t.Errorf("%s: select %s does not start at an empty choice", where, m[1])
		}
		for _, o := range opts {
			if o[1] != "" && o[2] != "" {
				t.Errorf("%s: select %s has %q chosen in advance", where, m[1], o[1])
			}
		}
	}
	if regexp.MustCompile(`type="(radio|checkbox)"[^>]* checked`).MatchString(seg) {
		t.Errorf("%s: a box is ticked in advance", where)
	}
	return len(selects)
}

// TestNoOutcomeOrActionIsChosenForYou: the resolve form and the bulk action start with nothing
// chosen (no outcome, no reason, no action), and a retry after a "not applied" resolution sends
// nothing without its explicit confirmation, saying so.
func TestNoOutcomeOrActionIsChosenForYou(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	item := e.openItem(t, "acme", "safe-1", reconcile.ReasonSyncTimeout)
	_, queue := e.do(t, "support", http.MethodGet, "/reconcile", nil)
	if n := selectsChooseNothing(t, "bulk action", testidText(queue, "bulk", "details")); n < 3 {
		t.Errorf("bulk action: %d selects checked, want the action, the outcome and the reason", n)
	}
	if res, _ := e.do(t, "support", http.MethodPost, "/reconcile/"+item+"/claim", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("claim: %d", res.StatusCode)
	}
	_, page := e.do(t, "support", http.MethodGet, "/reconcile/"+item, nil)
	if n := selectsChooseNothing(t, "resolve form", testidText(page, "resolve-form", "form")); n != 2 {
		t.Errorf("resolve form: %d selects checked, want the outcome and the reason", n)
	}
	// A bulk run without a chosen action runs nothing.
	if res, _ := e.do(t, "support", http.MethodPost, "/reconcile/bulk", url.Values{"confirm": {reconcile.ConfirmPhrase("claim", 1)}}); res.StatusCode == http.StatusOK {
		var batches int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_batches`).Scan(&batches); err != nil || batches != 0 {
			t.Errorf("a bulk run with no action chosen ran %d batches (%v)", batches, err)
		}
	}

	if res, body := e.do(t, "support", http.MethodPost, "/reconcile/"+item+"/resolve", url.Values{"outcome": {"not_applied"},
		"reason": {"confirmed with the customer"}, "note": {"nothing was refunded"}, "evidence_url": {"https://tickets.example/5"}}); res.StatusCode != http.StatusOK {
		t.Fatalf("resolve: %d\n%.300s", res.StatusCode, body)
	}
	_, page = e.do(t, "support", http.MethodGet, "/reconcile/"+item, nil)
	retry := testidText(page, "retry-form", "form")
	if !strings.Contains(retry, "same idempotency key") || !strings.Contains(retry, `data-testid="retry-confirm"`) {
		t.Fatalf("the retry does not say what it will do or asks no confirmation:\n%s", page)
	}
	selectsChooseNothing(t, "retry form", retry)
	res, body := e.do(t, "support", http.MethodPost, "/reconcile/"+item+"/retry", nil)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Nothing was sent") {
		t.Errorf("an unconfirmed retry: %d", res.StatusCode)
	}
	var retried bool
	if err := e.pool.QueryRow(context.Background(), `SELECT retried_at IS NOT NULL FROM reconciliation_items WHERE public_id = $1`, item).Scan(&retried); err != nil || retried {
		t.Errorf("an unconfirmed retry was recorded (%v)", err)
	}
}

// TestDestructiveButtonsConfirm: disabling an account and releasing a kill switch are only
// offered inside a confirmation that says what will happen.
func TestDestructiveButtonsConfirm(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	_, accounts := e.do(t, "admin", http.MethodGet, "/admin/accounts", nil)
	forms := regexp.MustCompile(`action="/admin/accounts/\d+/disable"`).FindAllStringIndex(accounts, -1)
	if len(forms) == 0 {
		t.Fatal("no account can be disabled: the test proves nothing")
	}
	for _, f := range forms {
		open := strings.LastIndex(accounts[:f[0]], "<details")
		closed := strings.LastIndex(accounts[:f[0]], "</details>")
		if open < 0 || closed > open || !strings.Contains(accounts[open:f[0]], `data-testid="disable-confirm-`) {
			t.Errorf("a disable form outside its confirmation at %d", f[0])
			continue
		}
		if end := strings.Index(accounts[f[0]:], "</details>"); end < 0 || !strings.Contains(accounts[f[0]:f[0]+end], "signed out everywhere") {
			t.Errorf("a disable confirmation does not say what happens")
		}
	}
	if err := e.flags.Engage(context.Background(), audit.Actor{Name: "oncall@test", Kind: audit.KindAccount}, "workflow", "refund", "refunds double-charging"); err != nil {
		t.Fatal(err)
	}
	_, ks := e.do(t, "operator", http.MethodGet, "/killswitch", nil)
	i := strings.Index(ks, `action="/killswitch/release"`)
	if i < 0 {
		t.Fatal("an engaged switch offers no release")
	}
	conf := strings.LastIndex(ks[:i], `data-testid="release-confirm"`)
	if conf < 0 || strings.LastIndex(ks[:i], "</details>") > conf || !strings.Contains(ks[conf:i], "start on their Task route again") {
		t.Errorf("the release is not behind a confirmation that says what will change")
	}
}
