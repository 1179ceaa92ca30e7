package web

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// openAPIDoc is the OpenAPI 3.1 description of /api/v1.
//
//go:embed openapi.json
var openAPIDoc []byte

// OperationsAPI is what the /api/v1 operation handlers need; operations.Service satisfies it.
// Every method checks the caller's tenant scope.
type OperationsAPI interface {
	Start(ctx context.Context, scope operations.Scope, req operations.StartRequest) (operations.StartResult, error)
	Get(ctx context.Context, scope operations.Scope, id string) (operations.Detail, error)
	List(ctx context.Context, scope operations.Scope, f operations.Filter) (operations.Page, error)
	Cancel(ctx context.Context, scope operations.Scope, id, by, reason string) (operations.Detail, error)
	AnswerInput(ctx context.Context, scope operations.Scope, id, key, by string, resp mcpclient.InputResponse) (operations.Detail, error)
	// CancelRecorded and AnswerInputRecorded are Cancel and AnswerInput with the audit rows
	// written by rec in the transactions that record each step.
	CancelRecorded(ctx context.Context, scope operations.Scope, id, by, reason string, rec operations.Recorder) (operations.Detail, error)
	AnswerInputRecorded(ctx context.Context, scope operations.Scope, id, key, by string, resp mcpclient.InputResponse, rec operations.Recorder) (operations.Detail, error)
	// Overview is the on-call picture of the ledger for the console's overview.
	Overview(ctx context.Context, scope operations.Scope, window time.Duration) (operations.Overview, error)
}

// opRecorder writes the audit row of each step of an operator action on an operation (cancel,
// its reply, an input answer) as the request's principal, with reason.
func (s *Server) opRecorder(r *http.Request, reason string) operations.Recorder {
	actor := s.actor(r)
	return func(ctx context.Context, tx pgx.Tx, st operations.Step) error {
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: st.Operation.Tenant, Action: st.Action,
			Target: "operation:" + st.Operation.ID, After: st.After, Reason: reason})
	}
}

// mountOperationsAPI adds the operation routes to the /api/v1 group (API token required).
func (s *Server) mountOperationsAPI(r chi.Router) {
	r.Get("/openapi.json", s.handleOpenAPI)
	r.Post("/operations", s.handleStartOperation)
	r.Get("/operations", s.handleListOperations)
	r.Get("/operations/{id}", s.handleGetOperation)
	r.Post("/operations/{id}/cancel", s.handleCancelOperation)
	r.Post("/operations/{id}/input", s.handleAnswerInput)
}

// apiScope is the caller's tenant scope in the operations package's terms.
func apiScope(r *http.Request) operations.Scope {
	p := principal(r)
	return operations.Scope{All: p.Scope.All, Tenants: p.Scope.Tenants}
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}

// writeAPI writes v as JSON with status.
func writeAPI(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// apiProblem is the body of an API error.
type apiProblem struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// apiError maps a domain error to its status in one place; 5xx are logged and answered with a
// safe message.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	type mapping struct {
		err    error
		status int
		code   string
	}
	for _, m := range []mapping{
		{operations.ErrNotFound, http.StatusNotFound, "not_found"},
		{operations.ErrKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{operations.ErrUnknownWorkflow, http.StatusUnprocessableEntity, "unknown_workflow"},
		{operations.ErrInvalidRequest, http.StatusBadRequest, "invalid_request"},
		{operations.ErrForbiddenTenant, http.StatusForbidden, "tenant_out_of_scope"},
		{operations.ErrCancelNotAdvertised, http.StatusConflict, "cancel_not_advertised"},
		{operations.ErrNotCancellable, http.StatusConflict, "not_cancellable"},
		{operations.ErrNoPendingInput, http.StatusConflict, "no_pending_input"},
		{operations.ErrInputElsewhere, http.StatusConflict, "input_held_elsewhere"},
		{operations.ErrAtCapacity, http.StatusTooManyRequests, "at_capacity"},
	} {
		if errors.Is(err, m.err) {
			if ce := (*operations.CapacityError)(nil); errors.As(err, &ce) {
				w.Header().Set("Retry-After", strconv.Itoa(ce.RetryAfterSeconds()))
			}
			msg := err.Error()
			if m.status == http.StatusNotFound {
				msg = "no such operation"
			}
			writeAPI(w, m.status, apiProblem{Error: m.code, Message: msg})
			return
		}
	}
	s.deps.Logger.ErrorContext(r.Context(), "api request failed", "err", err, "path", r.URL.Path, "request_id", requestID(r.Context()))
	writeAPI(w, http.StatusInternalServerError, apiProblem{Error: "internal", Message: "internal error (request " + requestID(r.Context()) + ")"})
}

// operationsAPI returns the operations dependency, or answers 503 when the console runs
// without one.
func (s *Server) operationsAPI(w http.ResponseWriter) (OperationsAPI, bool) {
	if s.deps.Operations == nil {
		writeAPI(w, http.StatusServiceUnavailable, apiProblem{Error: "unavailable", Message: "operations are not enabled on this console"})
		return nil, false
	}
	return s.deps.Operations, true
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", operations.ErrInvalidRequest, err)
	}
	return nil
}

func (s *Server) handleStartOperation(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.operationsAPI(w)
	if !ok {
		return
	}
	var req operations.StartRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.apiError(w, r, err)
		return
	}
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	if req.IdempotencyKey == "" {
		s.apiError(w, r, fmt.Errorf("%w: the Idempotency-Key header is required", operations.ErrInvalidRequest))
		return
	}
	res, err := ops.Start(r.Context(), apiScope(r), req)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Location", res.Response.Links.Self)
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeAPI(w, res.Status, res.Response)
}

func (s *Server) handleListOperations(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.operationsAPI(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := operations.Filter{Tenant: q.Get("tenant"), Workflow: q.Get("workflow"), Route: operations.Route(q.Get("route")),
		TaskState: operations.TaskState(q.Get("task_state")), DomainOutcome: operations.Outcome(q.Get("domain_outcome")),
		Mismatch: q.Get("mismatch") == "true", Attention: q.Get("attention") == "true", After: q.Get("after")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			s.apiError(w, r, fmt.Errorf("%w: limit must be a positive integer", operations.ErrInvalidRequest))
			return
		}
		f.Limit = n
	}
	page, err := ops.List(r.Context(), apiScope(r), f)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeAPI(w, http.StatusOK, page)
}

func (s *Server) handleGetOperation(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.operationsAPI(w)
	if !ok {
		return
	}
	d, err := ops.Get(r.Context(), apiScope(r), chi.URLParam(r, "id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeAPI(w, http.StatusOK, d)
}

// cancelBody is the body of a cancel request.
type cancelBody struct {
	Reason string `json:"reason"`
}

func (s *Server) handleCancelOperation(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.operationsAPI(w)
	if !ok {
		return
	}
	var b cancelBody
	if err := decodeJSON(w, r, &b); err != nil {
		s.apiError(w, r, err)
		return
	}
	d, err := ops.CancelRecorded(r.Context(), apiScope(r), chi.URLParam(r, "id"), principal(r).Name, b.Reason, s.opRecorder(r, b.Reason))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeAPI(w, http.StatusAccepted, d)
}

// inputBody is the body of an input answer. Content holds the answered values: they are
// passed to the server and never logged or stored.
type inputBody struct {
	Key     string         `json:"key"`
	Action  string         `json:"action"`
	Content map[string]any `json:"content"`
}

func (s *Server) handleAnswerInput(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.operationsAPI(w)
	if !ok {
		return
	}
	var b inputBody
	if err := decodeJSON(w, r, &b); err != nil {
		s.apiError(w, r, err)
		return
	}
	if b.Key == "" {
		s.apiError(w, r, fmt.Errorf("%w: key is required", operations.ErrInvalidRequest))
		return
	}
	d, err := ops.AnswerInputRecorded(r.Context(), apiScope(r), chi.URLParam(r, "id"), b.Key, principal(r).Name,
		mcpclient.InputResponse{Action: mcpclient.InputAction(b.Action), Content: b.Content}, s.opRecorder(r, ""))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeAPI(w, http.StatusAccepted, d)
}
