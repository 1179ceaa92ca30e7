package operations

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/safetext"
	"github.com/taskgate/taskgate/mcpclient"
)

// MetaOperationID is the _meta key carrying the operation id on every call Taskgate makes.
const MetaOperationID = "io.taskgate/operation-id"

// Envelope bounds.
const (
	// PreviewMax caps the text preview kept in an envelope.
	PreviewMax = 512
	// KeptResultMax caps a full result kept where the workflow allows it.
	KeptResultMax = 64 << 10
)

// RouteInput is what a Router decides from.
type RouteInput struct {
	// Workflow is the workflow's policy.
	Workflow *config.Workflow
	// Request is the start request.
	Request StartRequest
	// Conn is the live connection to the workflow's server, nil when DialErr is set or the
	// workflow never uses a Task.
	Conn mcpclient.Conn
	// DialErr is why no connection could be opened.
	DialErr error
}

// Router picks exactly one route for an operation. The rollout package's router (stages,
// flags, kill switch, manifests) satisfies it; PolicyRouter is the policy-only default.
type Router interface {
	Decide(ctx context.Context, in RouteInput) (Decision, error)
}

// RouterFunc adapts a function to Router (e.g. the rollout router, in the console's wiring).
type RouterFunc func(ctx context.Context, in RouteInput) (Decision, error)

// Decide calls f.
func (f RouterFunc) Decide(ctx context.Context, in RouteInput) (Decision, error) { return f(ctx, in) }

// PolicyRouter decides from the workflow policy and the live capabilities alone: a Task when
// the workflow allows one and the server offers it for the tool, otherwise the fallback.
type PolicyRouter struct{}

// Decide implements Router.
func (PolicyRouter) Decide(_ context.Context, in RouteInput) (Decision, error) {
	wf := in.Workflow
	fallback := func(code, why string) Decision {
		r := Route(wf.Fallback.Kind)
		return Decision{Route: r, ReasonCode: code, Reason: why + "; fallback: " + r.Words() + "."}
	}
	if wf.TaskUse == config.TaskNever {
		return fallback("task_use_never", "The workflow never runs as a Task"), nil
	}
	if in.Conn == nil {
		return fallback("server_unreachable", "The server could not be reached to check its Task capability"), nil
	}
	info := in.Conn.Info()
	switch info.Era {
	case mcpclient.EraExtension:
		if info.Capabilities.Extension {
			return Decision{Route: RouteTask, ReasonCode: "task_capable", Reason: "The server offers the 2026-07-28 tasks extension.", DeclareExtension: true}, nil
		}
	default:
		if info.Capabilities.TasksToolsCall {
			for _, t := range in.Conn.Tools() {
				if t.Name == wf.Tool && (t.TaskSupport == mcpclient.TaskOptional || t.TaskSupport == mcpclient.TaskRequired) {
					return Decision{Route: RouteTask, ReasonCode: "task_capable", Reason: "The tool supports task augmentation (" + string(t.TaskSupport) + ")."}, nil
				}
			}
			return fallback("tool_forbids_task", "The tool does not support task augmentation"), nil
		}
	}
	return fallback("no_task_capability", "The server does not advertise task-augmented tools/call"), nil
}

// Config configures a Service.
type Config struct {
	// Store is the ledger.
	Store *Store
	// Policy is the policy in force.
	Policy *config.Config
	// Servers holds the MCP connections.
	Servers *Servers
	// Router decides routes (default PolicyRouter).
	Router Router
	// JobClient calls the incumbent job APIs (default a pooled client).
	JobClient *http.Client
	// PollFloor is the shortest interval between polls of one task (default 250ms).
	PollFloor time.Duration
	// DefaultPoll is used when a server suggests no poll interval (default 1s).
	DefaultPoll time.Duration
	// Logger receives logs; no secrets or elicited values are logged (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// InputReopenWait is how long an answer to a 2025-11-25 question no connection here
	// holds waits for the server to ask it again on a new tasks/result (default 10s).
	InputReopenWait time.Duration
}

// Service is the start path and the operator actions on operations.
type Service struct {
	cfg Config
	inputHolders
	// reads bounds the job status reads in flight (ReadJobs).
	reads *jobReads
}

// NewService returns a Service; Store, Policy and Servers are required.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Policy == nil || cfg.Servers == nil {
		return nil, errors.New("operations: Store, Policy and Servers are required")
	}
	if cfg.Router == nil {
		cfg.Router = PolicyRouter{}
	}
	if cfg.JobClient == nil {
		cfg.JobClient = mcpclient.NewHTTPClient(0)
	}
	if cfg.PollFloor <= 0 {
		cfg.PollFloor = 250 * time.Millisecond
	}
	if cfg.DefaultPoll <= 0 {
		cfg.DefaultPoll = time.Second
	}
	if cfg.InputReopenWait <= 0 {
		cfg.InputReopenWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, reads: newJobReads()}, nil
}

// Store returns the service's store.
func (s *Service) Store() *Store { return s.cfg.Store }

func linksFor(id string, r Route) Links {
	l := Links{Self: "/api/v1/operations/" + id}
	if r == RouteTask {
		l.Cancel, l.Input = l.Self+"/cancel", l.Self+"/input"
	}
	return l
}

func validate(r StartRequest) error {
	var missing []string
	for name, v := range map[string]string{"Idempotency-Key": r.IdempotencyKey, "workflow": r.Workflow, "tenant": r.Tenant, "actor": r.Actor} {
		if strings.TrimSpace(v) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrInvalidRequest, strings.Join(missing, ", "))
	}
	if len(r.IdempotencyKey) > 255 {
		return fmt.Errorf("%w: Idempotency-Key longer than 255 characters", ErrInvalidRequest)
	}
	for _, f := range []struct{ name, v string }{{"Idempotency-Key", r.IdempotencyKey}, {"workflow", r.Workflow}, {"tenant", r.Tenant},
		{"actor", r.Actor}, {"object_ref", r.ObjectRef}, {"object_version", r.ObjectVersion}, {"intended_effect", r.IntendedEffect}} {
		if err := safetext.Check(f.name, f.v); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
	}
	if err := safetext.CheckJSON("arguments", r.Arguments); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if len(r.Arguments) > 0 && string(r.Arguments) != "null" {
		var m map[string]any
		if err := json.Unmarshal(r.Arguments, &m); err != nil {
			return fmt.Errorf("%w: arguments must be a JSON object", ErrInvalidRequest)
		}
	}
	return nil
}

// Start starts an operation exactly once per idempotency key: it writes the ledger row, the
// route decision and the route's first row in one transaction, then makes the route's call
// under the workflow's budget. A repeat of the same request replays the first answer.
func (s *Service) Start(ctx context.Context, scope Scope, req StartRequest) (StartResult, error) {
	if err := validate(req); err != nil {
		return StartResult{}, err
	}
	if !scope.Allows(req.Tenant) {
		return StartResult{}, fmt.Errorf("start for tenant %q: %w", req.Tenant, ErrForbiddenTenant)
	}
	wf, ok := s.cfg.Policy.Workflow(req.Workflow)
	if !ok {
		return StartResult{}, fmt.Errorf("%w: %q", ErrUnknownWorkflow, req.Workflow)
	}
	hash, err := RequestHash(req)
	if err != nil {
		return StartResult{}, err
	}
	// A repeat is found by the insert's key conflict. Only while the server's connection is not
	// open is the key looked up first, so that a repeat never waits for a dial.
	if !s.cfg.Servers.Connected(wf.Server) {
		if op, err := s.cfg.Store.byKey(ctx, req.Tenant, req.Workflow, req.IdempotencyKey); err == nil {
			return s.replay(ctx, op, hash)
		} else if !errors.Is(err, ErrNotFound) {
			return StartResult{}, err
		}
	}

	in := RouteInput{Workflow: wf, Request: req}
	if wf.TaskUse != config.TaskNever || wf.Fallback.Kind == config.FallbackSync {
		in.Conn, in.DialErr = s.cfg.Servers.Conn(ctx, wf.Server)
	}
	d, err := s.cfg.Router.Decide(ctx, in)
	if err != nil {
		return StartResult{}, fmt.Errorf("route %s: %w", req.Workflow, err)
	}
	args := req.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	ins, err := s.insertFor(wf, Insert{Request: req, Hash: hash, Arguments: args, PolicySHA: s.cfg.Policy.SHA256}, d, in.Conn != nil)
	if err != nil {
		return StartResult{}, err
	}
	if d.Route == RouteTask && wf.Concurrency > 0 {
		ins.Capacity, ins.CapacityLimit = s.capacityCheck(in, d, ins), wf.Concurrency
	}
	op, existing, err := s.cfg.Store.CreateOperation(ctx, ins)
	if err != nil {
		return StartResult{}, err
	}
	if existing {
		return s.replay(ctx, op, hash)
	}
	// The concurrency cap may have sent the operation to the fallback route.
	d = Decision{Route: op.Route, ReasonCode: op.ReasonCode, Reason: op.Reason, DeclareExtension: d.DeclareExtension && op.Route == RouteTask}
	// The call and its bookkeeping outlive a caller that hangs up: a half-recorded start
	// would be worse than a late answer.
	cctx := context.WithoutCancel(ctx)
	status := http.StatusAccepted
	switch d.Route {
	case RouteTask:
		if a, ok := s.createTask(cctx, op, wf, in.Conn, d, true); ok {
			return StartResult{Status: a.Status, Response: a.Body}, nil
		}
	case RouteSync:
		answered, a, stored := s.callSync(cctx, op, wf, in.Conn, true)
		if stored {
			return StartResult{Status: a.Status, Response: a.Body}, nil
		}
		if answered {
			status = http.StatusCreated
		}
	case RouteJobAPI:
		s.submitJob(cctx, op, wf)
	case RouteReject:
		st, body, _, err := s.cfg.Store.Response(cctx, op.ID)
		if err != nil {
			return StartResult{}, err
		}
		return StartResult{Status: st, Response: body}, nil
	}
	op, err = s.cfg.Store.Get(cctx, op.ID)
	if err != nil {
		return StartResult{}, err
	}
	st, body, err := s.cfg.Store.FirstResponse(cctx, op.ID, status, responseFor(op))
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{Status: st, Response: body}, nil
}

func responseFor(op Operation) StartResponse {
	r := StartResponse{OperationID: op.ID, Route: op.Route, ReasonCode: op.ReasonCode, Reason: op.Reason,
		DomainOutcome: op.DomainOutcome, Attention: op.Attention, AttentionReason: op.AttentionReason, Links: linksFor(op.ID, op.Route)}
	if op.Task != nil {
		r.TaskState, r.TaskID = op.Task.State, op.Task.TaskID
	}
	return r
}

// replay answers a repeat of a start request: the first answer's status code (202 while the
// first request is still in flight) with the operation as it stands now.
func (s *Service) replay(ctx context.Context, op Operation, hash string) (StartResult, error) {
	if op.requestHash != hash {
		return StartResult{}, fmt.Errorf("key %q of workflow %s was used for operation %s with a different request: %w",
			op.IdempotencyKey, op.Workflow, op.ID, ErrKeyReused)
	}
	st, _, ok, err := s.cfg.Store.Response(ctx, op.ID)
	if err != nil {
		return StartResult{}, err
	}
	if !ok {
		st = http.StatusAccepted
	}
	// The first answer's status code, with the operation as it is now.
	return StartResult{Status: st, Response: responseFor(op), Replayed: true}, nil
}

// callArgs returns the arguments with the operation id as the tool's idempotency key, where
// the workflow names one.
func callArgs(op Operation, wf *config.Workflow) map[string]any {
	args := map[string]any{}
	_ = json.Unmarshal(op.arguments, &args)
	if wf.IdempotencyArgument != "" {
		args[wf.IdempotencyArgument] = op.ID
	}
	return args
}

func callMeta(op Operation) map[string]any { return map[string]any{MetaOperationID: op.ID} }

// createTask makes the task-augmented call once under the create budget and records what
// came back. It never resends. marked says the ledger row was written with the call marked
// sending (a start); otherwise (a retry) it is marked first. For a start whose task was
// created and recorded as the server said it, the start's answer is returned with ok.
func (s *Service) createTask(ctx context.Context, op Operation, wf *config.Workflow, conn mcpclient.Conn, d Decision, marked bool) (answer FirstAnswer, ok bool) {
	log := s.cfg.Logger.With("operation", op.ID, "workflow", wf.Name)
	cctx, cancel := context.WithTimeout(ctx, wf.Budgets.Create.Timeout.Duration)
	defer cancel()
	opts := mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{Meta: callMeta(op)}, TTL: wf.MaxTTL.Duration}
	if !marked {
		if err := s.cfg.Store.MarkSending(ctx, op.ID, wf.Budgets.Create.Timeout.Duration); err != nil {
			log.Error("mark the task creation sending; not sent", "err", err)
			return answer, false
		}
	}
	task, err := conn.CreateTask(cctx, wf.Tool, callArgs(op, wf), opts)
	var noTask *mcpclient.NoTaskError
	switch {
	case err == nil:
		info := conn.Info()
		now := s.cfg.Now()
		created := task.CreatedAt
		if created.IsZero() {
			created = now
		}
		c := CreatedTask{TaskID: task.ID, Era: string(task.Era), State: TaskState(task.Status), StatusMessage: task.StatusMessage,
			SessionID: info.SessionID, Capabilities: info.RawCapabilities, ServerName: info.Name, ServerVersion: info.Version,
			CreatedAt: task.CreatedAt, UpdatedAt: task.LastUpdatedAt, TTL: task.TTL, PollInterval: task.PollInterval,
			Deadline: Deadline(created, task.TTL, wf.MaxTTL.Duration), NextPollAt: now.Add(max(task.PollInterval, s.cfg.PollFloor))}
		if task.PollInterval <= 0 {
			c.NextPollAt = now.Add(s.cfg.DefaultPoll)
		}
		clean, err := s.cfg.Store.RecordCreated(ctx, op.ID, c)
		if err != nil {
			log.Error("record created task", "err", err)
		}
		if !marked || !clean || err != nil {
			break
		}
		// The answer is what was just recorded. A Task start's answer is always 202, which a
		// repeat is given whether an answer was stored or not: none is stored.
		answered := op
		t := *op.Task
		t.TaskID, t.State = c.TaskID, c.State
		answered.Task = &t
		return FirstAnswer{Status: http.StatusAccepted, Body: responseFor(answered)}, true
	case errors.As(err, &noTask):
		// The extension server answered at once without a task: the call is finished.
		c := CreatedTask{Era: string(mcpclient.EraExtension), State: StateCompleted, StatusMessage: "answered without a task",
			Deadline: s.cfg.Now(), NextPollAt: s.cfg.Now()}
		if _, err := s.cfg.Store.RecordCreated(ctx, op.ID, c); err != nil {
			log.Error("record immediate result", "err", err)
		}
		out := mcpclient.Outcome{Status: mcpclient.StatusCompleted, Era: mcpclient.EraExtension, Result: noTask.Result, ToolError: noTask.Result != nil && noTask.Result.IsError}
		if err := s.cfg.Store.RecordEnvelope(ctx, op.ID, BuildEnvelope(out, wf.Server, "", wf.KeepResult, nil, s.cfg.Now()), SourceCreate); err != nil {
			log.Error("record envelope", "err", err)
		}
	case httpStatusOf(err) != 0:
		code, text := httpRefusal(err)
		s.refuse(ctx, op, fmt.Sprintf("task creation refused by the server (HTTP %d): %s", code, text), code < 500)
		log.Warn("task creation refused", "status", code)
	case refused(err):
		if errors.Is(err, mcpclient.ErrSessionGone) {
			s.cfg.Servers.Drop(conn)
		}
		s.refuse(ctx, op, "task creation refused: "+safeMessage(err), !isRPCError(err))
		log.Warn("task creation refused", "err", err)
	default:
		// Transport lost after the request may have been sent, or the answer was unusable: the
		// task may exist. Never resend.
		what := "no CreateTaskResult was read; the call is not resent: "
		if errors.Is(err, mcpclient.ErrMalformed) || errors.Is(err, mcpclient.ErrResultTooLarge) {
			what = "the server answered, but its CreateTaskResult is unusable (the task may exist); the call is not resent: "
		}
		if err := s.cfg.Store.MarkUnknown(ctx, op.ID, StateCreateUnacknowledged, ReasonCreateUnacknowledged,
			what+safeMessage(err)); err != nil {
			log.Error("record unacknowledged creation", "err", err)
		}
		log.Warn("task creation unacknowledged", "err", err)
	}
	_ = d
	return answer, false
}

// httpStatusOf returns the HTTP error status (400-599) a server, or a gateway in front of it,
// answered a call with when the answer carried no JSON-RPC message, or 0.
func httpStatusOf(err error) int {
	code, _ := mcpclient.HTTPStatus(err)
	return code
}

// httpRefusal returns the status and the server's text (sanitised, bounded) of an HTTP error
// answer.
func httpRefusal(err error) (int, string) {
	code, text := mcpclient.HTTPStatus(err)
	if text == "" {
		text = "no text"
	}
	return code, sanitize(text, 300)
}

// refused reports an error that proves the call did nothing: it never left, or the server
// answered it with an error.
func refused(err error) bool {
	if errors.Is(err, mcpclient.ErrCreateUnacknowledged) || errors.Is(err, mcpclient.ErrTransportLost) {
		return false
	}
	return errors.Is(err, mcpclient.ErrNotDelivered) || errors.Is(err, mcpclient.ErrSessionGone) ||
		errors.Is(err, mcpclient.ErrUnauthorized) || errors.Is(err, mcpclient.ErrTasksNotAdvertised) ||
		errors.Is(err, mcpclient.ErrToolForbidsTask) || errors.Is(err, mcpclient.ErrToolRequiresTask) ||
		errors.Is(err, mcpclient.ErrUnknownTool) || isRPCError(err)
}

func isRPCError(err error) bool {
	var rpc *mcpclient.RPCError
	return errors.As(err, &rpc)
}

// refuse records a call that provably did not start: task state failed (on the Task route)
// and, when nothing reached the server, the domain outcome not_run. A server's error answer
// leaves the outcome pending for the verifier.
func (s *Service) refuse(ctx context.Context, op Operation, msg string, notApplied bool) {
	store := s.cfg.Store
	_, err := store.pool.Exec(ctx, `UPDATE tasks SET state = 'failed', status_message = $2, terminal_at = now(), updated_at = now()
		WHERE operation_id = $1 AND state = 'creating'`, op.ID, msg)
	if err == nil {
		err = store.AddTimeline(ctx, op.ID, SourceCreate, string(StateFailed), msg)
	}
	if err == nil && notApplied {
		_, err = store.pool.Exec(ctx, `UPDATE operations SET domain_outcome = 'not_run', updated_at = now() WHERE id = $1 AND domain_outcome = 'pending'`, op.ID)
	}
	if err == nil {
		err = callRecorded(ctx, store.pool, op.ID)
	}
	if err != nil {
		s.cfg.Logger.Error("record refused call", "operation", op.ID, "err", err)
	}
}

// Deadline is the absolute end of watching: creation + min(granted TTL, policy max TTL).
func Deadline(created time.Time, granted *time.Duration, maxTTL time.Duration) time.Time {
	limit := maxTTL
	if granted != nil && (limit <= 0 || *granted < limit) {
		limit = *granted
	}
	if limit <= 0 {
		limit = time.Hour
	}
	return created.Add(limit)
}

// callSync makes the plain call under the fallback's maximum duration. marked says the ledger
// row was written with the call marked sending (a start); otherwise (a retry) it is marked
// first. It reports whether the call was answered; a timeout or lost transport leaves the
// outcome unknown for reconciliation.
func (s *Service) callSync(ctx context.Context, op Operation, wf *config.Workflow, conn mcpclient.Conn, marked bool) (answered bool, first FirstAnswer, stored bool) {
	log := s.cfg.Logger.With("operation", op.ID, "workflow", wf.Name)
	if conn == nil {
		s.refuse(ctx, op, "server unreachable; the call was not sent", true)
		return true, first, false
	}
	if !marked {
		if err := s.cfg.Store.MarkSending(ctx, op.ID, wf.Fallback.MaxDuration.Duration); err != nil {
			log.Error("mark the synchronous call sending; not sent", "err", err)
			return false, first, false
		}
		_ = s.cfg.Store.AddTimeline(ctx, op.ID, SourceCreate, "calling", "synchronous call sent")
	}
	started := s.cfg.Now()
	cctx, cancel := context.WithTimeout(ctx, wf.Fallback.MaxDuration.Duration)
	res, err := conn.CallTool(cctx, wf.Tool, callArgs(op, wf), mcpclient.CallOptions{Meta: callMeta(op)})
	cancel()
	// An answer is recorded with its timeline entry; a start's also with its first answer, in
	// one statement.
	answer := func(out mcpclient.Outcome, event, msg string) (bool, FirstAnswer, bool) {
		env := BuildEnvelope(out, wf.Server, "", wf.KeepResult, &started, s.cfg.Now())
		if marked {
			a, ok, err := s.cfg.Store.RecordSyncAnswer(ctx, op.ID, env, event, msg, FirstAnswer{Status: http.StatusCreated, Body: responseFor(op)})
			if err != nil {
				log.Error("record sync answer", "err", err)
			}
			if ok || err != nil {
				return true, a, ok
			}
		}
		if err := s.cfg.Store.RecordEnvelope(ctx, op.ID, env, SourceCreate); err != nil {
			log.Error("record sync answer", "err", err)
		}
		_ = s.cfg.Store.AddTimeline(ctx, op.ID, SourceCreate, event, msg)
		return true, FirstAnswer{}, false
	}
	var rpc *mcpclient.RPCError
	switch {
	case err == nil:
		out := mcpclient.Outcome{Status: mcpclient.StatusCompleted, Era: conn.Info().Era, Result: res, ToolError: res.IsError}
		return answer(out, out.Describe(), "synchronous call answered")
	case errors.As(err, &rpc) && !errors.Is(err, mcpclient.ErrTransportLost):
		out := mcpclient.Outcome{Status: mcpclient.StatusFailed, Era: conn.Info().Era, Error: rpc}
		return answer(out, "failed", fmt.Sprintf("synchronous call answered with a JSON-RPC error %d: %s", rpc.Code, sanitize(rpc.Message, 200)))
	case httpStatusOf(err) != 0:
		// The server answered with an HTTP error: a 4xx refused the call before it ran; after a
		// 5xx the verifier decides.
		code, text := httpRefusal(err)
		msg := fmt.Sprintf("synchronous call refused by the server (HTTP %d): %s", code, text)
		if code < 500 {
			s.refuse(ctx, op, msg, true)
			return true, first, false
		}
		// No JSON-RPC error code: the HTTP status and text are the preview.
		out := mcpclient.Outcome{Status: mcpclient.StatusFailed, Era: conn.Info().Era, Error: &mcpclient.RPCError{Message: fmt.Sprintf("HTTP %d: %s", code, text)}}
		return answer(out, "failed", msg)
	case refused(err):
		s.refuse(ctx, op, "synchronous call refused: "+safeMessage(err), true)
		return true, first, false
	default:
		reason := ReasonSyncTransportLost
		if errors.Is(err, context.DeadlineExceeded) {
			reason = ReasonSyncTimeout
		}
		// Say what happened: an answer that came but could not be used is not a silence.
		after := s.cfg.Now().Sub(started).Round(time.Millisecond)
		event, what := "unanswered", "synchronous call unanswered within "+wf.Fallback.MaxDuration.String()+"; outcome unknown"
		switch {
		case errors.Is(err, mcpclient.ErrResultTooLarge):
			event, what = "answer_refused", fmt.Sprintf("synchronous call answered after %s with a result over the size limit; "+
				"the answer was not kept and the outcome is unknown", after)
		case errors.Is(err, mcpclient.ErrMalformed):
			event, what = "answer_refused", fmt.Sprintf("synchronous call answered after %s, but the answer could not be read; outcome unknown", after)
		case !errors.Is(err, context.DeadlineExceeded):
			what = fmt.Sprintf("synchronous call lost its connection after %s before an answer was read; outcome unknown", after)
		}
		if err := s.cfg.Store.MarkUnknown(ctx, op.ID, "", reason, what+": "+safeMessage(err)); err != nil {
			log.Error("record sync timeout", "err", err)
		}
		_ = s.cfg.Store.AddTimeline(ctx, op.ID, SourceCreate, event, what)
		return false, first, false
	}
}

// BuildEnvelope turns a protocol outcome into the bounded envelope: status, era, sanitised
// message, size, hash, a capped text preview and an evidence handle; the full result (capped)
// only when keep is set.
func BuildEnvelope(out mcpclient.Outcome, server, taskID string, keep bool, started *time.Time, finished time.Time) Envelope {
	e := Envelope{Status: string(out.Status), Era: string(out.Era), ToolError: out.ToolError, StartedAt: started, FinishedAt: &finished}
	var raw []byte
	switch {
	case out.Result != nil:
		raw, _ = json.Marshal(out.Result)
		e.ResultSize = out.Result.Size
		if e.ResultSize == 0 {
			e.ResultSize = len(raw)
		}
		text, replaced := safetext.Clean(strings.Join(out.Result.Texts(), "\n"))
		e.Preview = sanitize(text, PreviewMax)
		var rawReplaced bool
		raw, rawReplaced = safetext.CleanJSON(raw)
		e.TextReplaced = replaced || rawReplaced
		if keep && len(raw) <= KeptResultMax {
			e.Result = raw
		}
	case out.Error != nil:
		raw, _ = json.Marshal(out.Error)
		code := out.Error.Code
		e.ErrorCode = &code
		e.ResultSize = len(raw)
		msg, replaced := safetext.Clean(out.Error.Message)
		e.TextReplaced = replaced
		e.Preview = sanitize(msg, PreviewMax)
	}
	if out.Task != nil {
		msg, replaced := safetext.Clean(out.Task.StatusMessage)
		e.TextReplaced = e.TextReplaced || replaced
		e.StatusMessage = sanitize(msg, PreviewMax)
		if !out.Task.CreatedAt.IsZero() && started == nil {
			c := out.Task.CreatedAt
			e.StartedAt = &c
		}
	}
	sum := sha256.Sum256(raw)
	e.ResultSHA256 = hex.EncodeToString(sum[:])
	id := taskID
	if id == "" {
		id = "sync"
	}
	// Each part is escaped, so a handle always splits into server, era, task and hash.
	e.EvidenceHandle = fmt.Sprintf("mcp:%s/%s/%s#sha256:%s", url.PathEscape(server), url.PathEscape(string(out.Era)), url.PathEscape(id),
		e.ResultSHA256[:16])
	return e
}

// sanitize makes text from outside fit to keep and show: invalid UTF-8 replaced, control
// characters (but newline and tab), invisible format characters (bidirectional overrides,
// zero-width characters) and line/paragraph separators stripped, and the whole capped at n
// bytes on a rune boundary.
func sanitize(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return safetext.Cut(s, n)
}

// safeMessage is an error's text fit for a timeline: sanitised and short. mcpclient errors
// carry no tokens or elicited values.
func safeMessage(err error) string { return sanitize(err.Error(), 300) }

// submitJob POSTs the operation to the incumbent job API with the operation id as the
// Idempotency-Key, once; the watchers follow the job's status.
func (s *Service) submitJob(ctx context.Context, op Operation, wf *config.Workflow) {
	log := s.cfg.Logger.With("operation", op.ID, "workflow", wf.Name)
	base, err := s.cfg.Servers.JobAPIURL(wf.Fallback.JobAPI)
	if err != nil {
		log.Error("job API", "err", err)
		return
	}
	body := map[string]any{}
	_ = json.Unmarshal(op.arguments, &body)
	body["effect"] = firstNonEmpty(op.IntendedEffect, wf.Name)
	b, _ := json.Marshal(body)
	cctx, cancel := context.WithTimeout(ctx, wf.Budgets.Create.Timeout.Duration)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, strings.TrimRight(base, "/")+"/jobs", bytes.NewReader(b))
	if err != nil {
		log.Error("job request", "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", op.ID)
	if err := s.jobAuth(req, wf); err != nil {
		// Nothing is sent: the job API would refuse the job without its credential.
		log.Error("job API credential", "err", err)
		_, _ = s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET status = 'refused', error = $2, updated_at = now() WHERE operation_id = $1`, op.ID, safeMessage(err))
		s.refuse(ctx, op, "job not submitted: "+safeMessage(err), true)
		return
	}
	if err := s.cfg.Store.MarkSending(ctx, op.ID, wf.Budgets.Create.Timeout.Duration); err != nil {
		log.Error("mark the job submission sending; not sent", "err", err)
		return
	}
	_ = s.cfg.Store.AddTimeline(ctx, op.ID, SourceCreate, "submitting", "job submitted to the job API")
	resp, err := s.cfg.JobClient.Do(req)
	if err != nil {
		_, _ = s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET status = 'unacknowledged', error = $2, updated_at = now() WHERE operation_id = $1`, op.ID, safeMessage(err))
		if err := s.cfg.Store.MarkUnknown(ctx, op.ID, "", ReasonJobUnacknowledged, "job submission unanswered: "+safeMessage(err)); err != nil {
			log.Error("record job unacknowledged", "err", err)
		}
		return
	}
	defer resp.Body.Close()
	var j jobAnswer
	if resp.StatusCode/100 == 2 && json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&j) == nil && j.ID != "" && !j.usable() {
		// The job API took the job but named it unusably: the job may exist, so its outcome is unknown.
		_, _ = s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET status = 'unacknowledged', error = $2, updated_at = now() WHERE operation_id = $1`, op.ID, "unusable job answer")
		if err := s.cfg.Store.MarkUnknown(ctx, op.ID, "", ReasonJobUnacknowledged, "job API answered with an unusable job id or status"); err != nil {
			log.Error("record unusable job answer", "err", err)
		}
		return
	}
	if resp.StatusCode/100 != 2 || j.ID == "" {
		_, _ = s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET status = 'refused', error = $2, updated_at = now() WHERE operation_id = $1`, op.ID, fmt.Sprintf("HTTP %d", resp.StatusCode))
		s.refuse(ctx, op, fmt.Sprintf("job API refused the job (HTTP %d)", resp.StatusCode), true)
		return
	}
	if err := s.cfg.Store.UpdateJob(ctx, op.ID, j, s.cfg.Now().Add(s.cfg.DefaultPoll), SourceCreate); err != nil {
		log.Error("record job", "err", err)
	}
}

type jobAnswer struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Error     string `json:"error"`
	ReceiptID string `json:"receipt_id"`
}

// maxJobField bounds a job id or receipt id from a job API.
const maxJobField = 200

// usable reports whether a job API's answer can be kept and followed: a job id and receipt of
// printable characters within maxJobField bytes, and a status the watchers know.
func (j jobAnswer) usable() bool {
	printable := func(s string) bool {
		return len(s) <= maxJobField && utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool {
			return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
		}) < 0
	}
	switch j.Status {
	case "queued", "running", "succeeded", "failed":
	default:
		return false
	}
	return j.ID != "" && printable(j.ID) && printable(j.ReceiptID)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func jobDone(status string) bool { return status == "succeeded" || status == "failed" }

// UpdateJob stores a job's status and the time of its next poll (none once it ended); a
// changed status goes on the timeline under source: SourceCreate for the job API's answer to
// the submission, SourcePoll for a status read.
func (s *Store) UpdateJob(ctx context.Context, opID string, j jobAnswer, next time.Time, source string) error {
	var nextAt *time.Time
	if !jobDone(j.Status) {
		nextAt = &next
	}
	var old string
	err := s.pool.QueryRow(ctx, `UPDATE job_runs n SET job_id = coalesce($2, n.job_id), status = $3, receipt_id = $4, error = $5,
		next_poll_at = $6, updated_at = now() FROM job_runs o WHERE n.operation_id = o.operation_id AND n.operation_id = $1 RETURNING o.status`,
		opID, j.ID, j.Status, j.ReceiptID, sanitize(j.Error, 300), nextAt).Scan(&old)
	if err != nil {
		return notFound(opID, err)
	}
	if err := callRecorded(ctx, s.pool, opID); err != nil {
		return err
	}
	if j.Status == "failed" && old != j.Status {
		if reason := boundReason(strings.TrimSpace(sanitize(j.Error, 300))); reason != "" {
			if _, err := s.pool.Exec(ctx, `UPDATE operations SET failure_reason = $2, failure_reason_by = $3 WHERE id = $1`, opID, reason, FailedByJobAPI); err != nil {
				return fmt.Errorf("store failure reason of %s: %w", opID, err)
			}
		}
	}
	if old != j.Status {
		return s.AddTimeline(ctx, opID, source, "job_"+j.Status, "job "+j.Status)
	}
	return nil
}

// jobLost records that the job API answered 404 for a job it had taken: the run stops being
// followed and the operation's outcome becomes unknown with an item.
func (s *Service) jobLost(ctx context.Context, opID, job string) {
	msg := "the job API no longer knows job " + safetext.Cut(job, maxJobField) + " (HTTP 404)"
	if _, err := s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET status = 'unobservable', error = $2, next_poll_at = NULL,
		lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE operation_id = $1 AND status IN ('queued', 'running')`, opID, msg); err != nil {
		s.cfg.Logger.Error("record job lost", "operation", opID, "err", err)
		return
	}
	if err := s.cfg.Store.MarkUnknown(ctx, opID, "", ReasonTaskUnobservable, msg); err != nil {
		s.cfg.Logger.Error("record job lost", "operation", opID, "err", err)
	}
}

// TakeDue is a watcher pass: the tasks replica takes into its hold (Store.AcquireDue) and the
// due jobs it is to read (ReadJobs), both claimed in one round trip. A replica passes four
// times a second, all day, and an idle pass is one exchange with the database. The two claims
// commit together; when either fails, neither is taken. The tasks taken go to hold before
// TakeDue returns; the jobs are only claimed, as many as this process has reads free for
// (maxJobReads), and each holds its read until ReadJobs is done with it. It returns how many
// tasks it took and the jobs.
func (s *Service) TakeDue(ctx context.Context, replica string, n int, ahead, lease, floor, defPoll time.Duration, hold func([]Acquired)) (int, DueJobs, error) {
	b := &pgx.Batch{}
	b.Queue(acquireDueSQL, acquireDueArgs(replica, n, ahead, lease, floor, defPoll)...)
	free, busy := s.reads.reserve(n)
	if free > 0 {
		b.Queue(claimJobsSQL, s.claimJobsArgs(replica, free, lease, busy)...)
	}
	br := s.cfg.Store.pool.SendBatch(ctx, b)
	tk, jobs, err := func() ([]taken, []dueJob, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, fmt.Errorf("acquire due tasks: %w", err)
		}
		tk, err := collectTaken(rows)
		if err != nil || free == 0 {
			return tk, nil, err
		}
		if rows, err = br.Query(); err != nil {
			return nil, nil, fmt.Errorf("claim due jobs: %w", err)
		}
		jobs, err := collectDueJobs(rows)
		return tk, jobs, err
	}()
	// The batch's claims are committed once it is closed without error: nothing is taken
	// before then.
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("take due tasks and jobs: %w", cerr)
	}
	if err != nil {
		s.reads.took(nil, free)
		return 0, DueJobs{}, err
	}
	s.reads.took(jobs, free)
	due := DueJobs{list: jobs, replica: replica}
	got, err := s.cfg.Store.loadTaken(ctx, tk)
	if err != nil {
		// The jobs stay claimed: their reads are still to be made.
		return 0, due, err
	}
	hold(got)
	return len(got), due, nil
}

// claimJobsSQL claims up to $2 due jobs for replica $1 for $3 ms, their next poll $4 ms out,
// leaving out those of the operations $5 (the jobs this process is reading already).
const claimJobsSQL = `
		WITH due AS (SELECT operation_id FROM job_runs WHERE status IN ('queued','running') AND next_poll_at <= now()
			AND (lease_expires_at IS NULL OR lease_expires_at < now() OR lease_owner = $1)
			AND NOT (operation_id = ANY($5::text[]::uuid[]))
			ORDER BY next_poll_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE job_runs j SET lease_owner = $1, lease_expires_at = now() + $3 * interval '1 millisecond', polls = j.polls + 1,
			next_poll_at = now() + $4 * interval '1 millisecond'
		FROM due WHERE j.operation_id = due.operation_id
		RETURNING j.operation_id, j.base_url, j.job_id, (SELECT o.workflow FROM operations o WHERE o.id = j.operation_id)`

func (s *Service) claimJobsArgs(replica string, n int, lease time.Duration, busy []string) []any {
	return []any{replica, n, lease.Milliseconds(), s.cfg.DefaultPoll.Milliseconds(), busy}
}
