package web

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/safetext"
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
	// Unknown /api/v1 paths and methods answer JSON like every other API answer.
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusNotFound, apiProblem{Error: "not_found", Message: "no such API path: " + safetext.Cut(r.URL.Path, 200)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeAPI(w, http.StatusMethodNotAllowed, apiProblem{Error: "method_not_allowed", Message: "method " + r.Method + " is not allowed on this path"})
	})
}

// dbUnavailable reports an error that says the database cannot be reached (refused or lost
// connections, a server shutting down or starting up), answered 503 with Retry-After.
func dbUnavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	var ne net.Error
	return errors.As(err, &ne) || pgconn.SafeToRetry(err)
}

// dbRetryAfter is the Retry-After (seconds) of a 503 for an unreachable database.
const dbRetryAfter = "5"

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
		{operations.ErrInputExpired, http.StatusGone, "input_expired"},
		{operations.ErrInvalidAnswer, http.StatusUnprocessableEntity, "invalid_answer"},
		{operations.ErrAtCapacity, http.StatusTooManyRequests, "at_capacity"},
		{errUnsupportedMedia, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{errTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
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
	var up *operations.UpstreamError
	if errors.As(err, &up) {
		s.deps.Logger.WarnContext(r.Context(), "api upstream failure", "err", err, "path", r.URL.Path, "request_id", requestID(r.Context()))
		if up.Timeout() {
			writeAPI(w, http.StatusGatewayTimeout, apiProblem{Error: "upstream_timeout", Message: "the MCP server did not answer within the budget"})
			return
		}
		writeAPI(w, http.StatusBadGateway, apiProblem{Error: "upstream_error", Message: safetext.Cut(up.Error(), 300)})
		return
	}
	if dbUnavailable(err) {
		s.deps.Logger.ErrorContext(r.Context(), "api database unavailable", "err", err, "path", r.URL.Path, "request_id", requestID(r.Context()))
		w.Header().Set("Retry-After", dbRetryAfter)
		writeAPI(w, http.StatusServiceUnavailable, apiProblem{Error: "database_unavailable", Message: "the ledger's database cannot be reached; retry later (request " + requestID(r.Context()) + ")"})
		return
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

var (
	errUnsupportedMedia = errors.New("the body must be JSON (Content-Type: application/json)")
	errTooLarge         = errors.New("request body too large")
)

// decodeJSON reads exactly one JSON value of Content-Type application/json into v: another
// media type is 415, a body past the cap 413, malformed JSON, unknown fields or anything after
// the value 400.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: got %q", errUnsupportedMedia, safetext.Cut(r.Header.Get("Content-Type"), 100))
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	var tooLarge *http.MaxBytesError
	if err := dec.Decode(v); err != nil {
		if errors.As(err, &tooLarge) {
			return errTooLarge
		}
		return fmt.Errorf("%w: body: %v", operations.ErrInvalidRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if errors.As(err, &tooLarge) {
			return errTooLarge
		}
		return fmt.Errorf("%w: body: unexpected data after the JSON value", operations.ErrInvalidRequest)
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
	if err := checkListQuery(q); err != nil {
		s.apiError(w, r, err)
		return
	}
	f := operations.Filter{Tenant: q.Get("tenant"), Workflow: q.Get("workflow"), Route: operations.Route(q.Get("route")),
		TaskState: operations.TaskState(q.Get("task_state")), DomainOutcome: operations.Outcome(q.Get("domain_outcome")),
		Mismatch: q.Get("mismatch") == "true", Attention: q.Get("attention") == "true", InFlight: q.Get("in_flight") == "true",
		After: q.Get("after")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			s.apiError(w, r, fmt.Errorf("%w: limit must be an integer from 1 to %d", operations.ErrInvalidRequest, maxListLimit))
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

// maxListLimit is the largest page the list answers.
const maxListLimit = 500

// checkListQuery refuses unknown filters and values outside each filter's set, naming them.
func checkListQuery(q url.Values) error {
	in := func(v string, set []string) bool { return v == "" || slices.Contains(set, v) }
	strs := func(list any) []string {
		var out []string
		switch l := list.(type) {
		case []operations.Route:
			for _, v := range l {
				out = append(out, string(v))
			}
		case []operations.TaskState:
			for _, v := range l {
				out = append(out, string(v))
			}
		case []operations.Outcome:
			for _, v := range l {
				out = append(out, string(v))
			}
		}
		return out
	}
	sets := map[string][]string{
		"route": strs(operations.Routes()), "task_state": strs(operations.TaskStates()), "domain_outcome": strs(operations.Outcomes()),
		"mismatch": {"true", "false"}, "attention": {"true", "false"}, "in_flight": {"true", "false"},
	}
	for name, vals := range q {
		switch name {
		case "tenant", "workflow", "after", "limit":
		case "route", "task_state", "domain_outcome", "mismatch", "attention", "in_flight":
		default:
			return fmt.Errorf("%w: unknown filter %q", operations.ErrInvalidRequest, safetext.Cut(name, 60))
		}
		if len(vals) > 1 {
			return fmt.Errorf("%w: filter %s given more than once", operations.ErrInvalidRequest, name)
		}
		if err := safetext.Check(name, vals[0]); err != nil {
			return fmt.Errorf("%w: %v", operations.ErrInvalidRequest, err)
		}
		if set, ok := sets[name]; ok && !in(vals[0], set) {
			return fmt.Errorf("%w: %s must be one of %s", operations.ErrInvalidRequest, name, strings.Join(set, ", "))
		}
	}
	return nil
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
	if err := safetext.Check("key", b.Key); err != nil {
		s.apiError(w, r, fmt.Errorf("%w: %v", operations.ErrInvalidRequest, err))
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
