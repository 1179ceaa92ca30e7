package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/taskgate/taskgate/audit"
)

// AuditView is the audit page's model.
type AuditView struct {
	Page    Page
	Rows    []audit.Row
	Actions []string
	Tenants []string
	// Filter is what the form shows; First is true on the newest page (which updates live).
	Actor, Action, Tenant, Target string
	First                         bool
	// Self is this page's URL (for live refresh); Next the older page's, "" on the last page.
	Self, Next string
}

// handleAudit lists the audit log within the reader's tenant scope, newest first, filtered by
// actor, action and tenant, a page at a time by keyset.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := AuditView{Actor: strings.TrimSpace(q.Get("actor")), Action: q.Get("action"), Tenant: q.Get("tenant"), First: q.Get("before") == "",
		Target: strings.TrimSpace(q.Get("target"))}
	if op := strings.TrimSpace(q.Get("operation")); op != "" {
		v.Target = "operation:" + op
	}
	if v.Tenant != "" && !s.allowTenant(w, r, v.Tenant) {
		return
	}
	format, ok := exportFormat(w, r)
	if !ok {
		return
	}
	all, tenants := principal(r).Scope.SQL()
	if format != "" {
		s.exportAudit(w, r, format, audit.Filter{Actor: v.Actor, Action: v.Action, Tenant: v.Tenant, Target: v.Target, AllTenants: all, Tenants: tenants, Limit: 500})
		return
	}
	page, err := s.deps.Audit.List(r.Context(), audit.Filter{Actor: v.Actor, Action: v.Action, Tenant: v.Tenant, Target: v.Target,
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
	for k, val := range map[string]string{"actor": v.Actor, "action": v.Action, "tenant": v.Tenant, "target": v.Target} {
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

// exportAudit writes the audit entries f selects, newest first, up to exportLimit, as CSV or JSON.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request, format string, f audit.Filter) {
	var rows [][]string
	for len(rows) < exportLimit {
		page, err := s.deps.Audit.List(r.Context(), f)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		for _, a := range page.Rows {
			rows = append(rows, []string{strconv.FormatInt(a.ID, 10), a.At.UTC().Format(time.RFC3339Nano), a.Actor, a.ActorKind, a.Role,
				a.Tenant, a.Action, a.Target, a.Reason, string(a.Before), string(a.After), a.RequestID})
		}
		if page.Next == "" {
			break
		}
		f.Before = page.Next
	}
	s.writeExport(w, r, format, "audit", []string{"id", "at", "actor", "actor_kind", "role", "tenant", "action", "target", "reason",
		"before", "after", "request_id"}, rows)
}

// targetHref is the console page of an audit row's target ("" when it has none).
func targetHref(target string) string {
	kind, id, ok := strings.Cut(target, ":")
	if !ok || id == "" {
		return ""
	}
	switch kind {
	case "operation":
		return "/operations/" + url.PathEscape(id)
	case "reconcile", "reconciliation", "reconciliation_item":
		return "/reconcile/" + url.PathEscape(id)
	case "reconciliation-batch":
		return "/reconcile/batches/" + url.PathEscape(id)
	}
	return ""
}

// auditVerbs says each audited action as the verb of a sentence: "<actor> <verb> <target>".
var auditVerbs = map[string]string{
	"account.change_password":    "changed the password of",
	"account.create":             "created the account",
	"account.disable":            "disabled the account",
	"account.enable":             "enabled the account",
	"account.reset_password":     "reset the password of",
	"account.set_role":           "changed the role and tenants of",
	"auth.proxy_signin":          "signed in through the proxy as",
	"auth.signin":                "signed in",
	"auth.signin_throttled":      "was throttled signing in",
	"auth.signout":               "signed out",
	"flag.change":                "changed the flag",
	"flag.delete":                "deleted the flag",
	"flag.import":                "imported flags into",
	"flag.revert":                "reverted the flag",
	"flag.set":                   "set the flag",
	"gate.run":                   "ran the gate suite for",
	"killswitch.engage":          "engaged the kill switch",
	"killswitch.release":         "released the kill switch",
	"killswitch.release_request": "asked to release the kill switch",
	"killswitch.release_approve": "approved the release of the kill switch",
	"operation.cancel":           "asked to cancel",
	"operation.cancel_reply":     "recorded the server's answer to the cancel of",
	"operation.input":            "answered a question of",
	"operation.retry":            "retried",
	"reconcile.batch":            "ran a bulk action on",
	"reconcile.claim":            "claimed",
	"reconcile.escalate":         "escalated",
	"reconcile.open":             "opened",
	"reconcile.release":          "released the claim on",
	"reconcile.resolve":          "resolved",
	"reconcile.retry":            "retried",
	"reconcile.reverify":         "sent back to the verifier",
	"reconcile.settle":           "settled",
	"rollout.pause":              "paused the rollout of",
	"rollout.promote":            "promoted the rollout of",
	"rollout.resume":             "resumed the rollout of",
	"rollout.rollback":           "rolled back",
	"server.probe":               "probed",
	"token.create":               "created the API token",
	"token.revoke":               "revoked the API token",
}

// auditVerb is the action as words; an action without words is shown as its code.
func auditVerb(action string) string {
	if v, ok := auditVerbs[action]; ok {
		return v
	}
	return "did " + action + " on"
}

// targetWords names an audit target for a sentence: "operation 0b1…", "reconciliation item 7".
func targetWords(target string) string {
	kind, id, ok := strings.Cut(target, ":")
	if !ok || id == "" {
		return target
	}
	switch kind {
	case "reconcile", "reconciliation", "reconciliation_item":
		return "reconciliation item " + id
	case "reconciliation-batch":
		return "reconciliation batch " + id
	}
	return strings.ReplaceAll(kind, "_", " ") + " " + id
}

// auditOperation is the operation id of an "operation:" target filter, else "".
func auditOperation(target string) string {
	if id, ok := strings.CutPrefix(target, "operation:"); ok {
		return id
	}
	return ""
}
