package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestAccountRoleAndTenants: an admin changes an account's role and tenants, picked from the
// policy's tenants; the change is audited with before and after and holds at the account's next
// request. A tenant outside the policy's list, all tenants from a one-tenant admin and a change
// of one's own role are refused.
func TestAccountRoleAndTenants(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	target := e.users["globex-viewer"].Account
	path := "/admin/accounts/" + id(target.ID) + "/role"

	_, page := e.do(t, "admin", http.MethodGet, "/admin/accounts", nil)
	form := testidText(page, "role-form-"+target.Email, "form")
	for _, tenant := range []string{"acme", "globex", "initech"} {
		if !has(form, "role-tenant-"+tenant) {
			t.Errorf("the role form offers no %s checkbox:\n%s", tenant, form)
		}
	}
	if !strings.Contains(form, `name="csrf_token"`) {
		t.Errorf("the role form carries no CSRF field:\n%s", form)
	}
	if res, _ := e.do(t, "globex-viewer", http.MethodGet, "/operations?tenant=acme", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("globex-viewer reads acme before the change: %d", res.StatusCode)
	}

	res, body := e.do(t, "admin", http.MethodPost, path, url.Values{"role": {"operator"}, "tenant": {"acme", "globex"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "is now operator for acme,globex") {
		t.Fatalf("change: %d\n%s", res.StatusCode, testidText(body, "flash", "div"))
	}
	a, err := e.auth.Account(t.Context(), target.ID)
	if err != nil || a.Role != "operator" || a.Scope.All || strings.Join(a.Scope.Tenants, ",") != "acme,globex" {
		t.Fatalf("stored account: %+v %v", a, err)
	}
	var audited bool
	for _, r := range e.auditRows(t) {
		if r.Action == "account.set_role" && r.Actor == "admin@test" && strings.Contains(r.Target, target.Email) &&
			strings.Contains(string(r.Before), "viewer") && strings.Contains(string(r.After), "operator") {
			audited = true
		}
	}
	if !audited {
		t.Error("no audit row account.set_role with before and after")
	}
	// The account's next request holds the new scope and role.
	if res, _ := e.do(t, "globex-viewer", http.MethodGet, "/operations?tenant=acme", nil); res.StatusCode != http.StatusOK {
		t.Errorf("after the change acme answers %d", res.StatusCode)
	}

	for name, c := range map[string]struct {
		who    string
		path   string
		form   url.Values
		status int
	}{
		"a tenant not in the policy":               {"admin", path, url.Values{"role": {"viewer"}, "tenant": {"nosuch"}}, http.StatusBadRequest},
		"no tenant":                                {"admin", path, url.Values{"role": {"viewer"}}, http.StatusBadRequest},
		"no role":                                  {"admin", path, url.Values{"tenant": {"acme"}}, http.StatusBadRequest},
		"all tenants from a one-tenant admin":      {"acme-admin", "/admin/accounts/" + id(e.users["acme-viewer"].Account.ID) + "/role", url.Values{"role": {"viewer"}, "all_tenants": {"yes"}}, http.StatusForbidden},
		"another's tenant from a one-tenant admin": {"acme-admin", "/admin/accounts/" + id(e.users["acme-viewer"].Account.ID) + "/role", url.Values{"role": {"viewer"}, "tenant": {"globex"}}, http.StatusBadRequest},
		"one's own role":                           {"admin", "/admin/accounts/" + id(e.users["admin"].Account.ID) + "/role", url.Values{"role": {"viewer"}, "tenant": {"acme"}}, http.StatusBadRequest},
		"by an operator":                           {"operator", path, url.Values{"role": {"admin"}, "all_tenants": {"yes"}}, http.StatusForbidden},
	} {
		if res, _ := e.do(t, c.who, http.MethodPost, c.path, c.form); res.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", name, res.StatusCode, c.status)
		}
	}
	if a, _ := e.auth.Account(t.Context(), target.ID); a.Role != "operator" || strings.Join(a.Scope.Tenants, ",") != "acme,globex" {
		t.Errorf("a refused change changed the account: %+v", a)
	}
	if me, _ := e.auth.Account(t.Context(), e.users["admin"].Account.ID); me.Role != "admin" {
		t.Errorf("the admin changed their own role: %+v", me)
	}
}
