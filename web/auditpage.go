package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/taskgate/taskgate/audit"
)

// AuditView is the audit page's model.
type AuditView struct {
	Page    Page
	Rows    []audit.Row
	Actions []string
	Tenants []string
	// Filter is what the form shows; First is true on the newest page (which updates live).
	Actor, Action, Tenant string
	First                 bool
	// Self is this page's URL (for live refresh); Next the older page's, "" on the last page.
	Self, Next string
}

// handleAudit lists the audit log within the reader's tenant scope, newest first, filtered by
// actor, action and tenant, a page at a time by keyset.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := AuditView{Actor: strings.TrimSpace(q.Get("actor")), Action: q.Get("action"), Tenant: q.Get("tenant"), First: q.Get("before") == ""}
	if v.Tenant != "" && !s.allowTenant(w, r, v.Tenant) {
		return
	}
	all, tenants := principal(r).Scope.SQL()
	page, err := s.deps.Audit.List(r.Context(), audit.Filter{Actor: v.Actor, Action: v.Action, Tenant: v.Tenant,
		AllTenants: all, Tenants: tenants, Before: q.Get("before"), Limit: 50})
	if errors.Is(err, audit.ErrBadCursor) {
		http.Error(w, "bad page cursor", http.StatusBadRequest)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if v.Actions, err = s.deps.Audit.Actions(r.Context()); err != nil {
		s.serverError(w, r, err)
		return
	}
	v.Page, v.Rows, v.Tenants = s.page("Audit log", "audit"), page.Rows, s.knownTenants(r)
	keep := url.Values{}
	for k, val := range map[string]string{"actor": v.Actor, "action": v.Action, "tenant": v.Tenant} {
		if val != "" {
			keep.Set(k, val)
		}
	}
	v.Self = "/audit?" + keep.Encode()
	if page.Next != "" {
		keep.Set("before", page.Next)
		v.Next = "/audit?" + keep.Encode()
	}
	s.render(w, r, http.StatusOK, auditPage(v))
}
