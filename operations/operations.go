// Package operations is Taskgate's domain-operation ledger and start path.
//
// An application starts a business operation once, under an idempotency key: the ledger row,
// the route decision with its reason and, on the Task route, a "creating" task row are written in
// one transaction; then the call runs under the workflow's create budget. The same key with the
// same request returns the same operation and the same answer; the same key with a different
// request is refused (ErrKeyReused). An originating tools/call is never sent twice: a creation
// whose answer was lost becomes "create_unacknowledged" with the domain outcome "unknown" and a
// reconciliation item.
//
// Task state (what the MCP server said) and domain outcome (what the system of record
// confirmed) are kept in separate fields and never derived from each other. The watch package
// observes the tasks started here; the reconciliation package settles unknown outcomes.
package operations

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/taskgate/taskgate/reconcile"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: no such operation, or not in the caller's tenant scope.
	ErrNotFound = errors.New("operation not found")
	// ErrKeyReused: the idempotency key was already used for a different request.
	ErrKeyReused = errors.New("idempotency key reused with a different request")
	// ErrInvalidRequest: the start request is incomplete or malformed.
	ErrInvalidRequest = errors.New("invalid operation request")
	// ErrUnknownWorkflow: the workflow is not in the policy.
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrForbiddenTenant: the caller may not act for the request's tenant.
	ErrForbiddenTenant = errors.New("tenant outside the caller's scope")
	// ErrCancelNotAdvertised: the server does not offer task cancellation.
	ErrCancelNotAdvertised = errors.New("server does not advertise tasks/cancel")
	// ErrNotCancellable: the operation has no running task to cancel.
	ErrNotCancellable = errors.New("operation has no running task to cancel")
	// ErrNoPendingInput: no open input request with this key.
	ErrNoPendingInput = errors.New("no open input request with this key")
	// ErrInputElsewhere: the input request is held by another replica's session.
	ErrInputElsewhere = errors.New("input request is held by another console replica")
)

// Route is the path an operation takes.
type Route string

// Routes.
const (
	RouteTask    Route = "task"
	RouteSync    Route = "sync"
	RouteJobAPI  Route = "job_api"
	RouteHandoff Route = "handoff"
	RouteReject  Route = "reject"
)

// TaskState is the transport state of an operation's task: one of the five protocol statuses
// or a local state Taskgate gives when the protocol cannot say.
type TaskState string

// Task states. The local states are creating (row written, call not answered yet),
// create_unacknowledged (the creation's answer was lost; never resent), unobservable (the
// server can no longer be asked) and expired (the task's TTL ran out before a terminal status).
const (
	StateCreating             TaskState = "creating"
	StateCreateUnacknowledged TaskState = "create_unacknowledged"
	StateWorking              TaskState = "working"
	StateInputRequired        TaskState = "input_required"
	StateCompleted            TaskState = "completed"
	StateFailed               TaskState = "failed"
	StateCancelled            TaskState = "cancelled"
	StateUnobservable         TaskState = "unobservable"
	StateExpired              TaskState = "expired"
)

// Watchable reports whether the watchers still poll a task in state s.
func (s TaskState) Watchable() bool { return s == StateWorking || s == StateInputRequired }

// Final reports whether s never changes again (protocol terminal or a local dead end).
func (s TaskState) Final() bool {
	switch s {
	case StateCompleted, StateFailed, StateCancelled, StateCreateUnacknowledged, StateUnobservable, StateExpired:
		return true
	}
	return false
}

// Outcome is the domain outcome the system of record confirms.
type Outcome string

// Domain outcomes. pending: not settled yet; unknown: Taskgate cannot tell and a person or a
// verifier must find out; no_effect: read-only work, nothing to verify; not_run: the work never
// ran (rejected, or the call was refused before it reached the tool); unverified: the work
// ended and the workflow has no verifier (listed and filterable, not a reconciliation item).
const (
	OutcomePending     Outcome = "pending"
	OutcomeApplied     Outcome = "applied"
	OutcomeNotApplied  Outcome = "not_applied"
	OutcomeCompensated Outcome = "compensated"
	OutcomeUnknown     Outcome = "unknown"
	OutcomeNoEffect    Outcome = "no_effect"
	OutcomeNotRun      Outcome = "not_run"
	OutcomeUnverified  Outcome = "unverified"
)

// Outcomes lists every domain outcome (the list filter accepts these).
func Outcomes() []Outcome {
	return []Outcome{OutcomePending, OutcomeApplied, OutcomeNotApplied, OutcomeCompensated, OutcomeUnknown,
		OutcomeNoEffect, OutcomeNotRun, OutcomeUnverified}
}

// TaskStates lists every task state (the list filter accepts these).
func TaskStates() []TaskState {
	return []TaskState{StateCreating, StateCreateUnacknowledged, StateWorking, StateInputRequired, StateCompleted,
		StateFailed, StateCancelled, StateUnobservable, StateExpired}
}

// Words names the task state for people: "input required", "create not acknowledged",
// "expired on the server"; the others as they are.
func (s TaskState) Words() string {
	switch s {
	case StateInputRequired:
		return "input required"
	case StateCreateUnacknowledged:
		return "create not acknowledged"
	case StateExpired:
		return "expired on the server"
	}
	return strings.ReplaceAll(string(s), "_", " ")
}

// Words names the route for people: "task", "synchronous call", "job API", "handoff to a
// person", "refusal".
func (r Route) Words() string {
	switch r {
	case RouteSync:
		return "synchronous call"
	case RouteJobAPI:
		return "job API"
	case RouteHandoff:
		return "handoff to a person"
	case RouteReject:
		return "refusal"
	}
	return string(r)
}

// Routes lists every route (the list filter accepts these).
func Routes() []Route { return []Route{RouteTask, RouteSync, RouteJobAPI, RouteHandoff, RouteReject} }

// Attention values and the reconciliation reason codes.
const (
	// AttentionReconcile marks an operation whose outcome is unknown: it has an open
	// reconciliation item.
	AttentionReconcile = "needs_reconciliation"
	// AttentionHandoff marks an operation handed to a person.
	AttentionHandoff = "needs_handoff"

	// The reason codes are reconcile's; see reconcile.Reasons for the whole catalogue.
	ReasonCreateUnacknowledged = reconcile.ReasonCreateUnacknowledged
	ReasonSyncTimeout          = reconcile.ReasonSyncTimeout
	ReasonSyncTransportLost    = reconcile.ReasonSyncTransportLost
	ReasonJobUnacknowledged    = reconcile.ReasonJobUnacknowledged
	ReasonTaskUnobservable     = reconcile.ReasonTaskUnobservable
	ReasonTaskExpired          = reconcile.ReasonTaskExpired
	ReasonSessionGone          = reconcile.ReasonSessionGone
	ReasonResultUnavailable    = reconcile.ReasonResultUnavailable
	ReasonCallUnrecorded       = reconcile.ReasonCallUnrecorded
	ReasonServerTextReplaced   = reconcile.ReasonServerTextReplaced
)

// Timeline sources: who or what wrote a timeline line. Each is stored as it is (migration 00023).
const (
	// SourcePoll is a status read by the watchers (tasks/get, or a job API's job status).
	SourcePoll = "poll"
	// SourceNotification is a status notification the server sent.
	SourceNotification = "notification"
	// SourceCreate is the call to the server and its answer (task creation, a synchronous
	// call, a job submission).
	SourceCreate = "create"
	// SourceWatcher is Taskgate's own background work: a question captured or closed, a result
	// that could not be fetched, a call never recorded, replaced text.
	SourceWatcher = "watcher"
	// SourceVerifier is the outcome verifier's check with the system of record.
	SourceVerifier = "verifier"
	// SourceCancelReply is the server's reply to a cancel request (acknowledged, refused, the
	// status it carried) or, with state cancel_unanswered, its absence.
	SourceCancelReply = "cancel_reply"
	// SourceAnswerReply is the server's reply to a person's answer that was not taken (state
	// input_refused), or the failure to deliver it.
	SourceAnswerReply = "answer_reply"
	// SourceOperator is a person's action; the person is named in TimelineEntry.Actor. Never
	// written for anything the person did not do.
	SourceOperator = "operator"
)

// TimelineSources lists every stored timeline source.
func TimelineSources() []string {
	return []string{SourcePoll, SourceNotification, SourceCreate, SourceWatcher, SourceVerifier, SourceCancelReply, SourceAnswerReply, SourceOperator}
}

// Scope is the set of tenants a caller may read and act for. The zero Scope allows nothing.
type Scope struct {
	// All allows every tenant (an administrator).
	All bool
	// Tenants lists the allowed tenants.
	Tenants []string
}

// Allows reports whether tenant is in scope.
func (s Scope) Allows(tenant string) bool { return s.All || slices.Contains(s.Tenants, tenant) }

// StartRequest is the body of POST /api/v1/operations plus its Idempotency-Key.
type StartRequest struct {
	IdempotencyKey string          `json:"-"`
	Workflow       string          `json:"workflow"`
	Tenant         string          `json:"tenant"`
	Actor          string          `json:"actor"`
	ObjectRef      string          `json:"object_ref"`
	ObjectVersion  string          `json:"object_version"`
	IntendedEffect string          `json:"intended_effect"`
	Arguments      json.RawMessage `json:"arguments"`
}

// Decision is a route decision with its reason.
type Decision struct {
	// Route is the chosen route.
	Route Route `json:"route"`
	// ReasonCode is a stable code, e.g. "task_capable", "task_use_never", "no_task_capability".
	ReasonCode string `json:"reason_code"`
	// Reason says the same in a sentence.
	Reason string `json:"reason"`
	// DeclareExtension is true when the call declares the 2026-07-28 tasks extension.
	DeclareExtension bool `json:"declare_extension"`
	// Context is the router's rollout context (stage, step, flag, bucket), kept on the row.
	Context json.RawMessage `json:"context,omitempty"`
}

// Operation is one ledger row.
type Operation struct {
	ID              string  `json:"id"`
	Tenant          string  `json:"tenant"`
	Workflow        string  `json:"workflow"`
	IdempotencyKey  string  `json:"idempotency_key"`
	Actor           string  `json:"actor"`
	ObjectRef       string  `json:"object_ref"`
	ObjectVersion   string  `json:"object_version"`
	IntendedEffect  string  `json:"intended_effect"`
	Route           Route   `json:"route"`
	ReasonCode      string  `json:"reason_code"`
	Reason          string  `json:"reason"`
	DomainOutcome   Outcome `json:"domain_outcome"`
	Attention       string  `json:"attention,omitempty"`
	AttentionReason string  `json:"attention_reason,omitempty"`
	// RouteContext is what sent the operation to its route (rollout.RouteContext), nil before.
	RouteContext json.RawMessage `json:"route_context,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	Task         *Task           `json:"task,omitempty"`
	Job          *JobRun         `json:"job,omitempty"`
	arguments    json.RawMessage // kept for the call, never served
	requestHash  string

	// NeedsPerson is true when the operation has an open question, reconciliation item or
	// handoff (NeedsPersonSQL).
	NeedsPerson bool `json:"needs_person"`

	// FailureReason is why the work failed, in the words of whoever said so (the first line
	// of the tool's error text or of the server's error message, else its final status
	// message; or a failed job's error), at most 200 characters; "" when it did not fail.
	// FailureReasonBy says whose words they are: FailedByTool, FailedByServer or
	// FailedByJobAPI.
	FailureReason   string `json:"failure_reason,omitempty"`
	FailureReasonBy string `json:"failure_reason_by,omitempty"`
}

// Whose words an operation's FailureReason is.
const (
	FailedByTool   = "tool"
	FailedByServer = "server"
	FailedByJobAPI = "job_api"
)

// maxFailureReason bounds a stored failure reason, in characters (an ellipsis marks a cut).
const maxFailureReason = 200

// FailureReason is why a result says the work failed, and whose words they are: for a tool
// error, a JSON-RPC error or a failed status, the first non-blank line of the result's text
// (the preview), else of the final status message, bounded to 200 characters. ("", "") when
// the result is not a failure or says nothing.
func (e Envelope) FailureReason() (reason, by string) {
	if !e.ToolError && e.ErrorCode == nil && e.Status != string(StateFailed) {
		return "", ""
	}
	by = FailedByServer
	if e.ToolError {
		by = FailedByTool
	}
	for _, text := range []string{e.Preview, e.StatusMessage} {
		line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
		if line = strings.TrimSpace(line); line != "" {
			return boundReason(line), by
		}
	}
	return "", ""
}

func boundReason(s string) string {
	if r := []rune(s); len(r) > maxFailureReason {
		return string(r[:maxFailureReason]) + "…"
	}
	return s
}

// Mismatch reports a disagreement between task state and domain outcome worth an alert: the
// task failed or was cancelled but the effect applied, or it completed but did not apply.
func (o Operation) Mismatch() bool {
	if o.Task == nil {
		return false
	}
	return Mismatch(o.Task.State, o.Task.ToolError, o.DomainOutcome)
}

// Task is an operation's task as last observed.
type Task struct {
	Server          string         `json:"server"`
	Tool            string         `json:"tool"`
	Era             string         `json:"era,omitempty"`
	TaskID          string         `json:"task_id,omitempty"`
	State           TaskState      `json:"state"`
	StatusMessage   string         `json:"status_message,omitempty"`
	ToolError       bool           `json:"tool_error"`
	ServerCreatedAt *time.Time     `json:"server_created_at,omitempty"`
	ServerUpdatedAt *time.Time     `json:"server_updated_at,omitempty"`
	RequestedTTL    *time.Duration `json:"-"`
	TTL             *time.Duration `json:"-"`
	PollInterval    time.Duration  `json:"-"`
	Deadline        *time.Time     `json:"deadline,omitempty"`
	NextPollAt      *time.Time     `json:"next_poll_at,omitempty"`
	Polls           int            `json:"polls"`
	FailureKind     string         `json:"failure_kind,omitempty"`
	ResultState     string         `json:"result_state"`
	CancelRequested *time.Time     `json:"cancel_requested_at,omitempty"`
	CancelBy        string         `json:"cancel_requested_by,omitempty"`
	CancelAcked     *time.Time     `json:"cancel_acknowledged_at,omitempty"`
	TerminalAt      *time.Time     `json:"terminal_at,omitempty"`
	sessionID       string
	capabilities    json.RawMessage
	serverName      string
	serverVersion   string
}

// MarshalJSON adds the durations in milliseconds.
func (t Task) MarshalJSON() ([]byte, error) {
	type plain Task
	ms := func(d *time.Duration) *int64 {
		if d == nil {
			return nil
		}
		v := d.Milliseconds()
		return &v
	}
	var poll *int64
	if t.PollInterval > 0 {
		p := t.PollInterval
		poll = ms(&p)
	}
	return json.Marshal(struct {
		plain
		RequestedTTLMs *int64 `json:"requested_ttl_ms,omitempty"`
		TTLMs          *int64 `json:"ttl_ms,omitempty"`
		PollIntervalMs *int64 `json:"poll_interval_ms,omitempty"`
	}{plain(t), ms(t.RequestedTTL), ms(t.TTL), poll})
}

// JobRun is an operation's job on the incumbent job API.
type JobRun struct {
	JobID     string `json:"job_id,omitempty"`
	Status    string `json:"status"`
	ReceiptID string `json:"receipt_id,omitempty"`
	Error     string `json:"error,omitempty"`
	Polls     int    `json:"polls"`
	baseURL   string
}

// TimelineEntry is one observed status.
type TimelineEntry struct {
	At time.Time `json:"at"`
	// Source is who or what wrote the line: one of TimelineSources.
	Source string `json:"source"`
	// Actor names the person of a line with source operator ("" for every other source, and
	// for a person's line recorded before names were stored apart and not found in it).
	Actor   string `json:"actor,omitempty"`
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// Violation is an observed status change the task state machine forbids.
type Violation struct {
	TaskID     string    `json:"task_id"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Source     string    `json:"source"`
	ObservedAt time.Time `json:"observed_at"`
	// Kind is "transition" or "task_id_changed"; Detail says what the server answered.
	Kind   string `json:"kind,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Field is one field of a pending input as the server's requested schema describes it (its
// name, type, words, rules, choices and default), never a value a person gave.
type Field struct {
	Name        string `json:"name"`
	Type        string `json:"type,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// Format is email, uri, date or date-time for strings.
	Format    string   `json:"format,omitempty"`
	MinLength *int     `json:"min_length,omitempty"`
	MaxLength *int     `json:"max_length,omitempty"`
	Minimum   *float64 `json:"minimum,omitempty"`
	Maximum   *float64 `json:"maximum,omitempty"`
	// Choices are the allowed values (enum, oneOf or the items of a multi-select).
	Choices []Choice `json:"choices,omitempty"`
	// Multiple says the answer is a list of choices (a multi-select array).
	Multiple bool `json:"multiple,omitempty"`
	MinItems *int `json:"min_items,omitempty"`
	MaxItems *int `json:"max_items,omitempty"`
	// Default is the schema's default value, filled when an answer omits the field.
	Default json.RawMessage `json:"default,omitempty"`
	// Unchecked says which parts of the server's schema for this field could not be used.
	Unchecked string `json:"unchecked,omitempty"`
}

// PendingInput is a question a server asked for a task.
type PendingInput struct {
	Key     string `json:"key"`
	Method  string `json:"method"`
	Mode    string `json:"mode,omitempty"`
	Message string `json:"message,omitempty"`
	// Title and Description are the requested schema's own words, if it has them.
	Title       string  `json:"title,omitempty"`
	Description string  `json:"description,omitempty"`
	Fields      []Field `json:"fields"`
	// RequestedSchema is the schema as the server sent it (at most MaxSchemaBytes).
	RequestedSchema json.RawMessage `json:"requested_schema,omitempty"`
	RedactionClass  string          `json:"redaction_class"`
	State           string          `json:"state"`
	RequestedAt     time.Time       `json:"requested_at"`
	ExpiresAt       *time.Time      `json:"expires_at,omitempty"`
	AnsweredAt      *time.Time      `json:"answered_at,omitempty"`
	AnsweredBy      string          `json:"answered_by,omitempty"`
	Action          string          `json:"action,omitempty"`
}

// Envelope is the bounded record of a task's (or a sync call's) result.
type Envelope struct {
	Status         string          `json:"status"`
	Era            string          `json:"era"`
	ToolError      bool            `json:"tool_error"`
	ErrorCode      *int            `json:"error_code,omitempty"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	StatusMessage  string          `json:"status_message,omitempty"`
	ResultSize     int             `json:"result_size"`
	ResultSHA256   string          `json:"result_sha256,omitempty"`
	Preview        string          `json:"preview,omitempty"`
	EvidenceHandle string          `json:"evidence_handle"`
	Result         json.RawMessage `json:"result,omitempty"`
	// TextReplaced says the server's text held NUL or invalid UTF-8, replaced by U+FFFD to be
	// stored: the record is not verbatim.
	TextReplaced bool      `json:"text_replaced"`
	FetchedAt    time.Time `json:"fetched_at"`
}

// ReconciliationItem is the open (or last) reconciliation item of an operation.
type ReconciliationItem struct {
	// ID is the item's public id (a random UUID).
	ID       string     `json:"id"`
	Reason   string     `json:"reason"`
	OpenedAt time.Time  `json:"opened_at"`
	ClosedAt *time.Time `json:"closed_at,omitempty"`
}

// Detail is an operation with everything observed about it.
type Detail struct {
	Operation
	Timeline       []TimelineEntry     `json:"timeline"`
	Violations     []Violation         `json:"violations"`
	Inputs         []PendingInput      `json:"inputs"`
	Envelope       *Envelope           `json:"envelope,omitempty"`
	Reconciliation *ReconciliationItem `json:"reconciliation,omitempty"`
	Mismatched     bool                `json:"mismatch"`
}

// Links are the URLs of an operation's resources.
type Links struct {
	Self   string `json:"self"`
	Cancel string `json:"cancel,omitempty"`
	Input  string `json:"input,omitempty"`
}

// StartResponse is the answer to a start request; it is stored and replayed to a repeat of
// the same request.
type StartResponse struct {
	OperationID     string    `json:"operation_id"`
	Route           Route     `json:"route"`
	ReasonCode      string    `json:"reason_code"`
	Reason          string    `json:"reason"`
	TaskState       TaskState `json:"task_state,omitempty"`
	TaskID          string    `json:"task_id,omitempty"`
	DomainOutcome   Outcome   `json:"domain_outcome"`
	Attention       string    `json:"attention,omitempty"`
	AttentionReason string    `json:"attention_reason,omitempty"`
	Links           Links     `json:"links"`
}

// StartResult is the outcome of Start: the HTTP status to answer with and the body.
type StartResult struct {
	// Status is 201 (finished), 202 (continues in the background) or 409 (rejected).
	Status int
	// Response is the body.
	Response StartResponse
	// Replayed is true when the same request was seen before and its answer is replayed.
	Replayed bool
}

// Filter selects operations for List.
type Filter struct {
	Tenant        string
	Workflow      string
	Route         Route
	TaskState     TaskState
	DomainOutcome Outcome
	// Mismatch keeps only operations whose task state and domain outcome disagree.
	Mismatch bool
	// Attention keeps only operations that need a person.
	Attention bool
	// InFlight keeps only operations whose task is creating, working or waiting for input.
	InFlight bool
	// NoTask keeps only operations without a task (TaskState is then ignored).
	NoTask bool
	// ToolError, when set, keeps only operations whose task's result is (true) or is not
	// (false) a tool error.
	ToolError *bool
	// Window, when positive, keeps only the operations the overview's matrix counts over that
	// window: started within it, or still open (task creating, working or waiting for input),
	// or marked for attention (RecentSQL).
	Window time.Duration
	// Search keeps operations whose business key contains it, or whose operation id, task id
	// or idempotency key is it.
	Search string
	// After is the keyset cursor from a previous Page ("" = first page).
	After string
	// Limit caps the page (default 50, at most 500).
	Limit int
}

// Page is one page of List.
type Page struct {
	Operations []Operation `json:"operations"`
	// Next is the cursor of the next page, "" on the last page.
	Next string `json:"next,omitempty"`
	// Total is the number of operations the filter selects over all pages.
	Total int `json:"total"`
}
