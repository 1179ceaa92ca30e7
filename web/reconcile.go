package web

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// The reconciliation queue: support staff claim, resolve and retry items; viewers read.

// mountReconcile adds the reconciliation pages to the console group: reads for every signed-in
// account, actions for the support role (admin holds it too).
func (s *Server) mountReconcile(r chi.Router) {
	r.Get("/reconcile", s.handleReconcileQueue)
	r.Get("/reconcile/{id}", s.handleReconcileItem)
	r.Get("/reconcile/batches/{id}", s.handleReconcileBatch)
	r.Group(func(r chi.Router) {
		r.Use(s.requireRole(auth.RoleSupport))
		r.Post("/reconcile/{id}/claim", s.reconcileAction("claim"))
		r.Post("/reconcile/{id}/release", s.reconcileAction("release"))
		r.Post("/reconcile/{id}/resolve", s.reconcileAction("resolve"))
		r.Post("/reconcile/{id}/retry", s.reconcileAction("retry"))
		r.Post("/reconcile/bulk", s.handleReconcileBulk)
	})
}

// ReconcileQueueView is the queue page.
type ReconcileQueueView struct {
	Page
	Enabled bool
	// Filter values as typed.
	Tenant, Workflow, Reason, State, Age, ClaimedBy string
	Items                                           []reconcile.Item
	// Total is the number of items the filters select over all pages.
	Total int
	Next  string
	// Query is the filter as a query string (no cursor); Self is this page's URL, for the
	// live refresh of its rows.
	Query             string
	Self              string
	Workflows         []string
	Tenants           []string
	Reasons           []string
	ResolutionReasons []string
	CanAct            bool
	Me                string
	// Preview is how many open items the filter selects (for bulk actions).
	Preview int
	// Batch is the bulk action just run (nil otherwise).
	Batch     *BatchView
	Flash     string
	FlashTone string
}

// BatchView is the result of a bulk action: the batch, what it touched and what it skipped.
type BatchView struct {
	// ID is the batch's public id.
	ID               string
	Action           string
	Matched, Applied int
	Skipped          []SkippedItem
}

// SkippedItem is an item a batch left alone, with why.
type SkippedItem struct {
	ID  string
	Why string
}

// ReconcileItemView is an item's page: the item, the operation's timeline beside the
// verifier answers and receipts, and the resolve form.
type ReconcileItemView struct {
	Page
	Item              reconcile.Item
	Operation         *operations.Detail
	Verifications     []reconcile.Verification
	ResolutionReasons []string
	CanAct            bool
	Mine              bool
	Flash             string
	FlashTone         string
}

func reconcileScope(r *http.Request) reconcile.Scope {
	p := principal(r)
	return reconcile.Scope{All: p.Scope.All, Tenants: p.Scope.Tenants}
}

// reconcileFilter reads the queue's filters from the query or the form.
func reconcileFilter(get func(string) string, me string) (reconcile.Filter, error) {
	f := reconcile.Filter{Tenant: get("tenant"), Workflow: get("workflow"), Reason: get("reason"), State: get("state"),
		ClaimedBy: get("claimed_by"), After: get("after")}
	if f.ClaimedBy == "me" {
		f.ClaimedBy = me
	}
	if a := get("age"); a != "" {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 {
			return f, errors.New("age: want a duration such as 30m or 24h")
		}
		f.OlderThan = d
	}
	return f, nil
}

func (s *Server) queueView(r *http.Request, get func(string) string) (ReconcileQueueView, int) {
	p := principal(r)
	v := ReconcileQueueView{Page: s.page("Reconciliation", "reconcile"), Enabled: s.deps.Reconcile != nil,
		Tenant: get("tenant"), Workflow: get("workflow"), Reason: get("reason"), State: get("state"), Age: get("age"),
		ClaimedBy: get("claimed_by"), Reasons: reconcile.Reasons(), CanAct: p.Can(auth.RoleSupport), Me: p.Name, Tenants: s.knownTenants(r)}
	if s.deps.Policy != nil {
		for _, w := range s.deps.Policy.Workflows {
			v.Workflows = append(v.Workflows, w.Name)
		}
	}
	if !v.Enabled {
		return v, http.StatusOK
	}
	v.ResolutionReasons = s.deps.Reconcile.ResolutionReasons()
	f, err := reconcileFilter(get, p.Name)
	if err != nil {
		v.Flash, v.FlashTone = err.Error(), "bad"
		return v, http.StatusBadRequest
	}
	if f.Tenant != "" && !p.Allows(f.Tenant) {
		return v, http.StatusOK // nothing of another tenant is shown, not even its absence
	}
	page, err := s.deps.Reconcile.List(r.Context(), reconcileScope(r), f)
	if err != nil {
		v.Flash, v.FlashTone = err.Error(), "bad"
		return v, http.StatusBadRequest
	}
	v.Items, v.Next, v.Total = page.Items, page.Next, page.Total
	q := url.Values{}
	for _, k := range []string{"tenant", "workflow", "reason", "state", "age", "claimed_by"} {
		if val := get(k); val != "" {
			q.Set(k, val)
		}
	}
	v.Query = q.Encode()
	if f.After != "" {
		q.Set("after", f.After)
	}
	v.Self = "/reconcile?" + q.Encode()
	if v.CanAct && (f.State == "" || f.State == string(reconcile.StateVerifying) || f.State == string(reconcile.StateNeedsPerson)) {
		v.Preview = page.Total // the bulk preview counts the open items the filter selects
	}
	return v, http.StatusOK
}

func (s *Server) handleReconcileQueue(w http.ResponseWriter, r *http.Request) {
	v, status := s.queueView(r, r.URL.Query().Get)
	s.render(w, r, status, reconcileQueuePage(v))
}

// reconcileItem loads the item of the {id} parameter after the tenant check; false means the
// response is written.
func (s *Server) reconcileItem(w http.ResponseWriter, r *http.Request) (reconcile.Item, bool) {
	if s.deps.Reconcile == nil {
		http.Error(w, "reconciliation is not enabled on this console", http.StatusServiceUnavailable)
		return reconcile.Item{}, false
	}
	// Another tenant's item, a missing one and an id of the wrong form all answer 404 alike.
	it, err := s.deps.Reconcile.Get(r.Context(), reconcileScope(r), chi.URLParam(r, "id"))
	if errors.Is(err, reconcile.ErrNotFound) {
		s.handleNotFound(w, r)
		return reconcile.Item{}, false
	}
	if err != nil {
		s.serverError(w, r, err)
		return reconcile.Item{}, false
	}
	return it, true
}

func (s *Server) itemView(r *http.Request, it reconcile.Item) (ReconcileItemView, error) {
	p := principal(r)
	v := ReconcileItemView{Page: s.page("Reconciliation item "+it.ID, "reconcile"), Item: it,
		ResolutionReasons: s.deps.Reconcile.ResolutionReasons(), CanAct: p.Can(auth.RoleSupport), Mine: it.ClaimedBy == p.Name}
	vs, err := s.deps.Reconcile.Verifications(r.Context(), reconcileScope(r), it.OperationID)
	if err != nil {
		return v, err
	}
	v.Verifications = vs
	if s.deps.Operations != nil {
		if d, err := s.deps.Operations.Get(r.Context(), apiScope(r), it.OperationID); err == nil {
			v.Operation = &d
		}
	}
	return v, nil
}

func (s *Server) handleReconcileItem(w http.ResponseWriter, r *http.Request) {
	it, ok := s.reconcileItem(w, r)
	if !ok {
		return
	}
	v, err := s.itemView(r, it)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, reconcileItemPage(v))
}

// ReconcileBatchView is a batch's page.
type ReconcileBatchView struct {
	Page
	Batch reconcile.Batch
}

// handleReconcileBatch shows one bulk action. Another tenant's batch, a missing one and an id
// of the wrong form (an old numeric one among them) all answer the same 404 as for items.
func (s *Server) handleReconcileBatch(w http.ResponseWriter, r *http.Request) {
	if s.deps.Reconcile == nil {
		http.Error(w, "reconciliation is not enabled on this console", http.StatusServiceUnavailable)
		return
	}
	b, err := s.deps.Reconcile.Batch(r.Context(), reconcileScope(r), chi.URLParam(r, "id"))
	if errors.Is(err, reconcile.ErrNotFound) {
		s.handleNotFound(w, r)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, reconcileBatchPage(ReconcileBatchView{Page: s.page("Reconciliation batch "+b.ID, "reconcile"), Batch: b}))
}

// reconcileError maps a reconcile error to a status and a message for people.
func reconcileError(err error) (int, string) {
	switch {
	case errors.Is(err, reconcile.ErrClaimed):
		return http.StatusConflict, "Refused: " + err.Error() + ". Claims are never taken over; wait for it to expire or ask the holder."
	case errors.Is(err, reconcile.ErrNotClaimed):
		return http.StatusConflict, "Claim the item first."
	case errors.Is(err, reconcile.ErrClosed):
		return http.StatusConflict, "The item is already closed."
	case errors.Is(err, reconcile.ErrRetryNotAllowed), errors.Is(err, operations.ErrNotRetryable):
		return http.StatusConflict, "A retry is offered only once, after the outcome was resolved not_applied."
	case errors.Is(err, reconcile.ErrInvalid):
		return http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, reconcile.ErrConfirmation):
		return http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, reconcile.ErrNotFound):
		return http.StatusNotFound, "No such item."
	}
	return 0, ""
}

// reconcileAction handles claim, release, resolve and retry on one item; each is audited in
// the transaction that makes it.
func (s *Server) reconcileAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		it, ok := s.reconcileItem(w, r)
		if !ok {
			return
		}
		actor, scope := s.actor(r), reconcileScope(r)
		var err error
		msg := ""
		switch action {
		case "claim":
			_, err = s.deps.Reconcile.Claim(r.Context(), actor, scope, it.ID, 0)
			msg = "Claimed. Your claim expires in " + reconcile.DefaultLease.String() + "."
		case "release":
			_, err = s.deps.Reconcile.Release(r.Context(), actor, scope, it.ID)
			msg = "Claim released."
		case "resolve":
			_, err = s.deps.Reconcile.Resolve(r.Context(), actor, scope, it.ID, reconcile.Resolution{
				Outcome: reconcile.Outcome(r.PostFormValue("outcome")), Reason: r.PostFormValue("reason"),
				Note: r.PostFormValue("note"), EvidenceURL: r.PostFormValue("evidence_url")})
			msg = "Resolved as " + r.PostFormValue("outcome") + "."
		case "retry":
			if r.PostFormValue("confirm") != "yes" {
				break
			}
			_, err = s.deps.Reconcile.Retry(r.Context(), actor, scope, it.ID)
			msg = "Retry sent with the same idempotency key."
		}
		status, tone := http.StatusOK, "ok"
		if action == "retry" && r.PostFormValue("confirm") != "yes" {
			// A retry after a resolution runs the call again: it needs an explicit confirmation.
			status, tone, msg = http.StatusUnprocessableEntity, "bad",
				"Nothing was sent. Tick the confirmation: a retry calls the tool again with the same idempotency key."
		}
		if err != nil {
			st, m := reconcileError(err)
			if st == 0 {
				s.serverError(w, r, err)
				return
			}
			status, tone, msg = st, "bad", m
		}
		cur, gerr := s.deps.Reconcile.Get(r.Context(), scope, it.ID)
		if gerr != nil {
			s.serverError(w, r, gerr)
			return
		}
		v, verr := s.itemView(r, cur)
		if verr != nil {
			s.serverError(w, r, verr)
			return
		}
		v.Flash, v.FlashTone = msg, tone
		s.render(w, r, status, reconcileItemPage(v))
	}
}

// handleReconcileBulk runs a bulk action over the items the posted filter selects, after the
// typed confirmation, as one audited batch.
func (s *Server) handleReconcileBulk(w http.ResponseWriter, r *http.Request) {
	if s.deps.Reconcile == nil {
		http.Error(w, "reconciliation is not enabled on this console", http.StatusServiceUnavailable)
		return
	}
	get := r.PostFormValue
	p := principal(r)
	f, err := reconcileFilter(get, p.Name)
	status, tone, msg := http.StatusOK, "ok", ""
	var batch *BatchView
	if err == nil && f.Tenant != "" && !p.Allows(f.Tenant) {
		s.forbidden(w, r, "That tenant is outside your scope.")
		return
	}
	if err != nil {
		status, tone, msg = http.StatusUnprocessableEntity, "bad", err.Error()
	} else {
		res, berr := s.deps.Reconcile.Bulk(r.Context(), s.actor(r), reconcileScope(r), reconcile.BulkRequest{Filter: f,
			Action: get("action"), Confirm: get("confirm"), Resolution: reconcile.Resolution{Outcome: reconcile.Outcome(get("outcome")),
				Reason: get("reason_text"), Note: get("note"), EvidenceURL: get("evidence_url")}})
		if berr != nil {
			st, m := reconcileError(berr)
			if st == 0 {
				s.serverError(w, r, berr)
				return
			}
			status, tone, msg = st, "bad", m
		} else {
			batch = &BatchView{ID: res.BatchID, Action: get("action"), Matched: res.Matched, Applied: res.Applied}
			for id, why := range res.Skipped {
				batch.Skipped = append(batch.Skipped, SkippedItem{ID: id, Why: why})
			}
			slices.SortFunc(batch.Skipped, func(a, b SkippedItem) int { return cmp.Compare(a.ID, b.ID) })
			msg = "Batch " + res.BatchID + ": " + get("action") + " applied to " + strconv.Itoa(res.Applied) +
				" of " + strconv.Itoa(res.Matched) + " items; " + strconv.Itoa(len(res.Skipped)) + " skipped."
			if len(res.Skipped) > 0 {
				tone = "warn"
			}
		}
	}
	v, _ := s.queueView(r, get)
	v.Flash, v.FlashTone, v.Batch = msg, tone, batch
	s.render(w, r, status, reconcileQueuePage(v))
}

// itemStateWords names an item's state for people.
func itemStateWords(st reconcile.State) string {
	switch st {
	case reconcile.StateNeedsPerson:
		return "needs a person"
	}
	return strings.ReplaceAll(string(st), "_", " ")
}

func itemStateTone(st reconcile.State) string {
	switch st {
	case reconcile.StateNeedsPerson:
		return "warn"
	case reconcile.StateVerifying:
		return "info"
	case reconcile.StateSettled, reconcile.StateResolved:
		return "ok"
	}
	return "idle"
}

func outcomeTone(o string) string {
	switch o {
	case "applied":
		return "ok"
	case "not_applied", "compensated", "duplicate":
		return "info"
	case "unknown":
		return "bad"
	}
	return "idle"
}

func queueHref(v ReconcileQueueView) string {
	q, _ := url.ParseQuery(v.Query)
	q.Set("after", v.Next)
	return "/reconcile?" + q.Encode()
}

func itemHref(id string) string { return "/reconcile/" + url.PathEscape(id) }

func optSelected(cur, v string) bool { return strings.EqualFold(cur, v) }

func intStr(n int) string { return strconv.Itoa(n) }

// batchHref is a batch's page.
func batchHref(id string) string { return "/reconcile/batches/" + url.PathEscape(id) }

// batchAuditHref is the audit log filtered to a batch's own row.
func batchAuditHref(id string) string {
	return "/audit?target=" + url.QueryEscape(reconcile.BatchTarget(id))
}

// exportItem is one queue row in an export: the item, its operation and its claim.
type exportItem struct {
	ID               string     `json:"id"`
	OperationID      string     `json:"operation_id"`
	Tenant           string     `json:"tenant"`
	Workflow         string     `json:"workflow"`
	ObjectRef        string     `json:"object_ref"`
	IntendedEffect   string     `json:"intended_effect"`
	Route            string     `json:"route"`
	IdempotencyKey   string     `json:"idempotency_key"`
	Reason           string     `json:"reason"`
	ReasonText       string     `json:"reason_text"`
	Detail           string     `json:"detail"`
	State            string     `json:"state"`
	Attempts         int        `json:"attempts"`
	TaskState        string     `json:"task_state"`
	DomainOutcome    string     `json:"domain_outcome"`
	OpenedAt         time.Time  `json:"opened_at"`
	ClaimedBy        string     `json:"claimed_by"`
	ClaimExpiresAt   *time.Time `json:"claim_expires_at"`
	Resolution       string     `json:"resolution"`
	ResolutionReason string     `json:"resolution_reason"`
	Note             string     `json:"note"`
	EvidenceURL      string     `json:"evidence_url"`
	ClosedBy         string     `json:"closed_by"`
	ClosedAt         *time.Time `json:"closed_at"`
	BatchID          *string    `json:"batch_id"`
	RetriedAt        *time.Time `json:"retried_at"`
}

func toExport(it reconcile.Item) exportItem {
	return exportItem{ID: it.ID, OperationID: it.OperationID, Tenant: it.Tenant, Workflow: it.Workflow, ObjectRef: it.ObjectRef,
		IntendedEffect: it.IntendedEffect, Route: it.Route, IdempotencyKey: it.IdempotencyKey, Reason: it.Reason,
		ReasonText: reconcile.ReasonText(it.Reason), Detail: it.Detail, State: string(it.State), Attempts: it.Attempts,
		TaskState: it.TaskState, DomainOutcome: it.DomainOutcome, OpenedAt: it.OpenedAt, ClaimedBy: it.ClaimedBy,
		ClaimExpiresAt: it.ClaimExpiresAt, Resolution: string(it.Resolution), ResolutionReason: it.ResolutionReason, Note: it.Note,
		EvidenceURL: it.EvidenceURL, ClosedBy: it.ClosedBy, ClosedAt: it.ClosedAt, BatchID: it.BatchID, RetriedAt: it.RetriedAt}
}

func timeCell(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// handleExportReconcile writes the queue the filters select as CSV (?format=csv) or JSON
// (?format=json), within the principal's tenant scope, oldest first, at most exportLimit items.
func (s *Server) handleExportReconcile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format := q.Get("format")
	if format != "csv" && format != "json" {
		http.Error(w, "format must be csv or json", http.StatusBadRequest)
		return
	}
	if s.deps.Reconcile == nil {
		http.Error(w, "reconciliation is not enabled on this console", http.StatusServiceUnavailable)
		return
	}
	p := principal(r)
	f, err := reconcileFilter(q.Get, p.Name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.Tenant != "" && !s.allowTenant(w, r, f.Tenant) {
		return
	}
	f.After, f.Limit = "", 500
	items := []exportItem{}
	for len(items) < exportLimit {
		page, err := s.deps.Reconcile.List(r.Context(), reconcileScope(r), f)
		if errors.Is(err, reconcile.ErrInvalid) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		for _, it := range page.Items {
			items = append(items, toExport(it))
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	filter := map[string]string{}
	for _, k := range []string{"tenant", "workflow", "reason", "state", "age", "claimed_by"} {
		if v := q.Get(k); v != "" {
			filter[k] = v
		}
	}
	name := "reconciliation-" + s.deps.Now().UTC().Format("20060102-150405")
	w.Header().Set("Cache-Control", "no-store")
	if format == "json" {
		b, err := json.MarshalIndent(map[string]any{"items": items, "filter": filter}, "", "  ")
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.json"`)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"id", "operation_id", "tenant", "workflow", "object_ref", "intended_effect", "route", "idempotency_key",
		"reason", "reason_text", "detail", "state", "attempts", "task_state", "domain_outcome", "opened_at", "claimed_by",
		"claim_expires_at", "resolution", "resolution_reason", "note", "evidence_url", "closed_by", "closed_at", "batch_id", "retried_at"})
	for _, it := range items {
		batch := ""
		if it.BatchID != nil {
			batch = *it.BatchID
		}
		rec := []string{it.ID, it.OperationID, it.Tenant, it.Workflow, it.ObjectRef, it.IntendedEffect, it.Route,
			it.IdempotencyKey, it.Reason, it.ReasonText, it.Detail, it.State, strconv.Itoa(it.Attempts), it.TaskState, it.DomainOutcome,
			it.OpenedAt.UTC().Format(time.RFC3339Nano), it.ClaimedBy, timeCell(it.ClaimExpiresAt), it.Resolution, it.ResolutionReason,
			it.Note, it.EvidenceURL, it.ClosedBy, timeCell(it.ClosedAt), batch, timeCell(it.RetriedAt)}
		for i, c := range rec {
			rec[i] = csvSafe(c)
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
}

// exportHref is the export link of the queue's current filter.
func exportHref(v ReconcileQueueView, format string) string {
	q, _ := url.ParseQuery(v.Query)
	q.Set("format", format)
	return "/reconcile/export?" + q.Encode()
}
