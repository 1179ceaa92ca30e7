package web

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/safetext"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// OperationsView is the operations list's model.
type OperationsView struct {
	Page Page
	// Filter is the list's filter; Query is it as a query string ("" when none).
	Filter operations.Filter
	Query  string
	// Self is this page's URL (for live refreshes); Next is the next page's, "" on the last.
	Self, Next string
	// First is true on the first page (only the first page refreshes live).
	First bool
	// Shown is the number of rows on this page; Total the number the filter selects in all.
	Shown, Total int
	// Groups are the page's rows by attention group, attention first.
	Groups []OpGroup
	// Options for the filters.
	Tenants, Workflows []string
	// Unavailable is true when the console runs without operations.
	Unavailable bool
}

// OpGroup is one attention group of rows.
type OpGroup struct {
	Name string
	Key  string
	Rows []OpRow
}

// OpRow is one operation as a row says it (CONSOLE.md rule 1).
type OpRow struct {
	Op                     operations.Operation
	Server, Tool           string
	Args                   string
	StateWords, StateTone  string
	OutcomeWords, OutcomeT string
	Mismatch               bool
	Elapsed, ExpiresIn     string
	RouteWords             string
	// RolloutWords is the stage, step, flag and bucket that sent it to its route (rule 10).
	RolloutWords string
}

func (s *Server) opRow(op operations.Operation, now time.Time) OpRow {
	server, tool := toolOf(op, s.deps.Policy)
	st, te := taskState(op), op.Task != nil && op.Task.ToolError
	return OpRow{Op: op, Server: server, Tool: tool, Args: strings.Join(op.ArgumentNames(), ", "),
		StateWords: stateWords(st, te), StateTone: stateTone(st, te),
		OutcomeWords: outcomeWords(op.DomainOutcome), OutcomeT: opOutcomeTone(op.DomainOutcome), Mismatch: op.Mismatch(),
		Elapsed: opElapsed(op, now), ExpiresIn: opExpiresIn(op, now), RouteWords: routeWords(op), RolloutWords: rolloutWords(op)}
}

// opFilter reads the list's filters from the query. Besides the form's fields, the overview's
// links carry in_flight=true, task_state=none (no task), tool_error=true|false and window=12h
// (what the matrix counts), so each number links to exactly the operations it counts.
func opFilter(q url.Values) operations.Filter {
	f := operations.Filter{Tenant: q.Get("tenant"), Workflow: q.Get("workflow"), Route: operations.Route(q.Get("route")),
		TaskState: operations.TaskState(q.Get("task_state")), DomainOutcome: operations.Outcome(q.Get("domain_outcome")),
		Mismatch: q.Get("mismatch") == "true", Attention: q.Get("attention") == "true", InFlight: q.Get("in_flight") == "true",
		After: q.Get("after"), Search: safeSearch(q.Get("q"))}
	if f.TaskState == taskStateNone {
		f.TaskState, f.NoTask = "", true
	}
	switch q.Get("tool_error") {
	case "true", "false":
		te := q.Get("tool_error") == "true"
		f.ToolError = &te
	}
	if d, err := time.ParseDuration(q.Get("window")); err == nil && d >= time.Hour && d <= 31*24*time.Hour {
		f.Window = d.Truncate(time.Hour)
	}
	return f
}

// taskStateNone is the task_state filter value of operations without a task.
const taskStateNone = "none"

// extraFilterWords says in words the filters the form has no field for, "" when none is set.
func extraFilterWords(f operations.Filter) string {
	var w []string
	if f.InFlight {
		w = append(w, "in flight (creating, working or waiting for input)")
	}
	if f.NoTask {
		w = append(w, "without a task")
	}
	if f.ToolError != nil {
		w = append(w, map[bool]string{true: "with a tool error", false: "without a tool error"}[*f.ToolError])
	}
	if f.Window > 0 {
		w = append(w, "started in the last "+humanDur(f.Window)+", or still open, or marked for attention")
	}
	return strings.Join(w, "; ")
}

// safeSearch bounds a search to 200 characters.
func safeSearch(q string) string {
	if r := []rune(strings.TrimSpace(q)); len(r) > 200 {
		return string(r[:200])
	}
	return strings.TrimSpace(q)
}

// filterQuery writes a filter back as a query string, without the cursor.
func filterQuery(f operations.Filter) string {
	q := url.Values{}
	for k, v := range map[string]string{"tenant": f.Tenant, "workflow": f.Workflow, "route": string(f.Route),
		"task_state": string(f.TaskState), "domain_outcome": string(f.DomainOutcome)} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Mismatch {
		q.Set("mismatch", "true")
	}
	if f.Search != "" {
		q.Set("q", f.Search)
	}
	if f.Attention {
		q.Set("attention", "true")
	}
	if f.InFlight {
		q.Set("in_flight", "true")
	}
	if f.NoTask {
		q.Set("task_state", taskStateNone)
	}
	if f.ToolError != nil {
		q.Set("tool_error", strconv.FormatBool(*f.ToolError))
	}
	if f.Window > 0 {
		q.Set("window", fmt.Sprintf("%dh", int(f.Window/time.Hour)))
	}
	return q.Encode()
}

// consoleOps returns the operations dependency, or renders the page without it.
func (s *Server) consoleOps() (OperationsAPI, bool) {
	return s.deps.Operations, s.deps.Operations != nil
}

// handleOperations lists operations in the principal's scope with filters and keyset pages,
// grouped attention first within the page.
func (s *Server) handleOperations(w http.ResponseWriter, r *http.Request) {
	v := OperationsView{Page: s.page("Operations", "operations"), Tenants: s.knownTenants(r)}
	if s.deps.Policy != nil {
		for _, wf := range s.deps.Policy.Workflows {
			v.Workflows = append(v.Workflows, wf.Name)
		}
	}
	v.Filter = opFilter(r.URL.Query())
	if v.Filter.Tenant != "" && !s.allowTenant(w, r, v.Filter.Tenant) {
		return
	}
	v.Query = filterQuery(v.Filter)
	v.Self, v.First = "/operations", v.Filter.After == ""
	if v.Query != "" {
		v.Self += "?" + v.Query
	}
	ops, ok := s.consoleOps()
	if !ok {
		v.Unavailable = true
		s.render(w, r, http.StatusOK, operationsPage(v))
		return
	}
	page, err := ops.List(r.Context(), apiScope(r), v.Filter)
	if errors.Is(err, operations.ErrInvalidRequest) {
		http.Error(w, "bad cursor", http.StatusBadRequest)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if page.Next != "" {
		q := url.Values{}
		if v.Query != "" {
			q, _ = url.ParseQuery(v.Query)
		}
		q.Set("after", page.Next)
		v.Next = "/operations?" + q.Encode()
	}
	now := s.deps.Now()
	groups := make([]OpGroup, len(groupNames))
	for i, n := range groupNames {
		groups[i] = OpGroup{Name: n, Key: []string{"person", "running", "trouble", "done"}[i]}
	}
	v.Shown, v.Total = len(page.Operations), page.Total
	for _, op := range page.Operations {
		g := attentionGroup(op)
		groups[g].Rows = append(groups[g].Rows, s.opRow(op, now))
	}
	for _, g := range groups {
		if len(g.Rows) > 0 {
			v.Groups = append(v.Groups, g)
		}
	}
	s.render(w, r, http.StatusOK, operationsPage(v))
}

// exportLimit caps one export.
const exportLimit = 20000

// handleExportOperations writes the filtered list as CSV (?format=csv) or JSON (?format=json),
// within the principal's tenant scope, newest first.
func (s *Server) handleExportOperations(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "csv" && format != "json" {
		http.Error(w, "format must be csv or json", http.StatusBadRequest)
		return
	}
	f := opFilter(r.URL.Query())
	if f.Tenant != "" && !s.allowTenant(w, r, f.Tenant) {
		return
	}
	ops, ok := s.consoleOps()
	if !ok {
		http.Error(w, "operations are not enabled on this console", http.StatusServiceUnavailable)
		return
	}
	f.After, f.Limit = "", 500
	var all []operations.Operation
	for len(all) < exportLimit {
		page, err := ops.List(r.Context(), apiScope(r), f)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		all = append(all, page.Operations...)
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	name := "operations-" + s.deps.Now().UTC().Format("20060102-150405")
	w.Header().Set("Cache-Control", "no-store")
	if format == "json" {
		if all == nil {
			all = []operations.Operation{}
		}
		b, err := json.MarshalIndent(map[string]any{"operations": all, "filter": filterQuery(f)}, "", "  ")
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
	_ = cw.Write([]string{"id", "tenant", "workflow", "object_ref", "intended_effect", "actor", "route", "reason_code", "reason",
		"server", "tool", "task_id", "era", "task_state", "tool_error", "domain_outcome", "mismatch", "attention", "created_at", "deadline", "failure_reason", "failure_reason_by"})
	for _, op := range all {
		server, tool := toolOf(op, s.deps.Policy)
		var taskID, era, state, toolErr, deadline string
		if t := op.Task; t != nil {
			taskID, era, state, toolErr = t.TaskID, t.Era, string(t.State), strconv.FormatBool(t.ToolError)
			if t.Deadline != nil {
				deadline = t.Deadline.UTC().Format(time.RFC3339)
			}
		}
		rec := []string{op.ID, op.Tenant, op.Workflow, op.ObjectRef, op.IntendedEffect, op.Actor, string(op.Route), op.ReasonCode, op.Reason,
			server, tool, taskID, era, state, toolErr, string(op.DomainOutcome), strconv.FormatBool(op.Mismatch()), op.Attention,
			op.CreatedAt.UTC().Format(time.RFC3339Nano), deadline, op.FailureReason, op.FailureReasonBy}
		for i, c := range rec {
			rec[i] = csvSafe(c)
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
}

// csvSafe keeps a spreadsheet from reading a cell as a formula.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// loadOperation reads an operation and checks the principal's tenant; false when the answer is
// already written (404 for reads, 403 for actions, as allowTenant says).
func (s *Server) loadOperation(w http.ResponseWriter, r *http.Request) (operations.Detail, bool) {
	ops, ok := s.consoleOps()
	if !ok {
		s.handleNotFound(w, r)
		return operations.Detail{}, false
	}
	d, err := ops.Get(r.Context(), operations.Scope{All: true}, chi.URLParam(r, "id"))
	if errors.Is(err, operations.ErrNotFound) {
		s.handleNotFound(w, r)
		return d, false
	}
	if err != nil {
		s.serverError(w, r, err)
		return d, false
	}
	if !s.allowTenant(w, r, d.Tenant) {
		return d, false
	}
	return d, true
}

// Flash messages of the detail page after an action (by code, so a link cannot write text).
var opFlashes = map[string]struct{ text, tone string }{
	"cancel-sent":  {"Cancellation requested and sent to the server. The steps below show what the server has acknowledged; the domain outcome stays to be verified.", "ok"},
	"input-sent":   {"Answer sent to the server. The values were not stored; the input ledger shows who answered and when.", "ok"},
	"input-wanted": {"", ""},
}

// handleOperation shows one operation with everything observed about it.
func (s *Server) handleOperation(w http.ResponseWriter, r *http.Request) {
	d, ok := s.loadOperation(w, r)
	if !ok {
		return
	}
	f := opFlashes[r.URL.Query().Get("done")]
	s.render(w, r, http.StatusOK, operationPage(s.operationView(r, d, f.text, f.tone)))
}

// handleCancelOperationForm asks the server to cancel the operation's task (operators): role
// and tenant checked again, the request and the server's reply audited in the transactions
// that record them.
func (s *Server) handleCancelOperationForm(w http.ResponseWriter, r *http.Request) {
	d, ok := s.loadOperation(w, r)
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		s.render(w, r, http.StatusUnprocessableEntity, operationPage(s.operationView(r, d, "Say why the task is cancelled: the reason goes to the timeline and the audit log.", "bad")))
		return
	}
	if len(reason) > 500 {
		reason = safetext.CutPlain(reason, 500)
	}
	_, err := s.deps.Operations.CancelRecorded(r.Context(), apiScope(r), d.ID, principal(r).Name, reason, s.opRecorder(r, reason))
	if err != nil {
		s.actionFailed(w, r, d.ID, err)
		return
	}
	http.Redirect(w, r, "/operations/"+d.ID+"?done=cancel-sent", http.StatusSeeOther)
}

// handleAnswerInputForm answers an open input request (operators and support): the values go
// to the server and are never stored or logged; who answered, when and how is audited.
func (s *Server) handleAnswerInputForm(w http.ResponseWriter, r *http.Request) {
	d, ok := s.loadOperation(w, r)
	if !ok {
		return
	}
	key := r.PostFormValue("key")
	var in *operations.PendingInput
	for i := range d.Inputs {
		if d.Inputs[i].Key == key {
			in = &d.Inputs[i]
		}
	}
	if in == nil {
		s.actionFailed(w, r, d.ID, operations.ErrNoPendingInput)
		return
	}
	action := mcpclient.InputAction(r.PostFormValue("action"))
	resp := mcpclient.InputResponse{Action: action}
	if action == mcpclient.ActionAccept {
		content, msg := inputContent(*in, r)
		if msg != "" {
			s.render(w, r, http.StatusUnprocessableEntity, operationPage(s.operationView(r, d, msg, "bad")))
			return
		}
		resp.Content = content
	}
	_, err := s.deps.Operations.AnswerInputRecorded(r.Context(), apiScope(r), d.ID, key, principal(r).Name, resp, s.opRecorder(r, ""))
	if err != nil {
		s.actionFailed(w, r, d.ID, err)
		return
	}
	if r.PostFormValue("back") == "inbox" {
		http.Redirect(w, r, "/inbox?done=input-sent", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/operations/"+d.ID+"?done=input-sent", http.StatusSeeOther)
}

// inputContent reads the answered fields by their declared types; msg says what is wrong.
func inputContent(in operations.PendingInput, r *http.Request) (map[string]any, string) {
	out := map[string]any{}
	for _, f := range in.Fields {
		if f.Multiple {
			var picked []string
			for _, v := range r.PostForm["field."+f.Name] {
				if v = strings.TrimSpace(v); v != "" {
					picked = append(picked, v)
				}
			}
			if len(picked) > 0 || f.Required && len(f.Default) == 0 {
				out[f.Name] = append([]string{}, picked...)
			}
			continue
		}
		raw := strings.TrimSpace(r.PostFormValue("field." + f.Name))
		if raw == "" {
			// Nothing is chosen for the person, a yes/no included: an empty answer is no answer.
			if f.Required && len(f.Default) == 0 {
				return nil, "The server requires " + f.Name + "."
			}
			continue
		}
		switch f.Type {
		case "boolean":
			if raw != "true" && raw != "false" {
				return nil, f.Name + " must be yes or no."
			}
			out[f.Name] = raw == "true"
		case "integer":
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				return nil, f.Name + " must be a whole number."
			}
			out[f.Name] = n
		case "number":
			n, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				return nil, f.Name + " must be a number."
			}
			out[f.Name] = n
		default:
			out[f.Name] = raw
		}
	}
	return out, ""
}

// actionFailed re-renders the detail page with why an action did not happen.
func (s *Server) actionFailed(w http.ResponseWriter, r *http.Request, id string, err error) {
	msgs := []struct {
		err    error
		status int
		msg    string
	}{
		{operations.ErrNotFound, http.StatusNotFound, "No such operation."},
		{operations.ErrCancelNotAdvertised, http.StatusConflict, "The server does not offer task cancellation (tasks/cancel is not advertised), so nothing was sent."},
		{operations.ErrNotCancellable, http.StatusConflict, "The task is no longer running, so there is nothing to cancel."},
		{operations.ErrNoPendingInput, http.StatusConflict, "That question is no longer open: the task moved on, the question expired or someone answered it."},
		{operations.ErrInputExpired, http.StatusGone, "That question can no longer be answered: the server is no longer waiting for it (see the question's state)."},
		{operations.ErrInputElsewhere, http.StatusConflict, "The question is held by another console replica's session; answer it there or wait for the next poll."},
		{operations.ErrInvalidAnswer, http.StatusUnprocessableEntity, "The answer does not fit what the server asked for: fill every required field with a value of its type."},
		{operations.ErrInvalidRequest, http.StatusUnprocessableEntity, "The answer was not valid: choose accept, decline or cancel."},
	}
	status, msg := 0, ""
	for _, m := range msgs {
		if errors.Is(err, m.err) {
			status, msg = m.status, m.msg
			break
		}
	}
	if ae := (*operations.AnswerError)(nil); errors.As(err, &ae) {
		msg = "The answer does not fit what the server asked for: " + ae.Error() + ". Nothing was sent."
	}
	if status == 0 {
		s.deps.Logger.ErrorContext(r.Context(), "operation action failed", "err", err, "operation", id, "request_id", requestID(r.Context()))
		status, msg = http.StatusBadGateway, "The server did not take the request (request "+requestID(r.Context())+"). The timeline shows what was recorded."
	}
	d, gerr := s.deps.Operations.Get(r.Context(), apiScope(r), id)
	if gerr != nil {
		http.Error(w, msg, status)
		return
	}
	s.render(w, r, status, operationPage(s.operationView(r, d, msg, "bad")))
}

// mayAnswer are the roles that may answer a server's question: operators run the work and
// support staff settle outcomes with the customer; viewers only read.
var mayAnswer = []auth.Role{auth.RoleOperator, auth.RoleSupport}

func canAnswer(p auth.Principal) bool {
	return slices.ContainsFunc(mayAnswer, p.Can)
}
