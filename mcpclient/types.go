package mcpclient

import (
	"encoding/json"
	"time"
)

// Era names the wire shape of MCP Tasks a server speaks. Its value is the
// protocol revision that introduced that shape.
type Era string

const (
	// EraLegacy is the experimental core Tasks of protocol revision
	// 2025-11-25: initialize, params.task, tasks/result, tasks/list.
	EraLegacy Era = "2025-11-25"
	// EraExtension is the 2026-07-28 extension io.modelcontextprotocol/tasks:
	// server/discover, stateless requests, resultType "task", tasks/update.
	EraExtension Era = "2026-07-28"
)

// EraChoice is what the caller asks Dial for: detect the era, or force one.
type EraChoice string

const (
	// EraAuto detects the era as the extension reference describes and uses
	// the per-server cache of a Detector when one is configured.
	EraAuto EraChoice = "auto"
	// EraChoiceLegacy skips detection and speaks 2025-11-25 (initialize).
	EraChoiceLegacy EraChoice = "legacy"
	// EraChoiceExtension skips detection and speaks 2026-07-28.
	EraChoiceExtension EraChoice = "extension"
)

// ParseEraChoice turns "auto", "legacy" or "extension" (or "" for auto)
// into an EraChoice.
func ParseEraChoice(s string) (EraChoice, error) {
	switch s {
	case "", string(EraAuto):
		return EraAuto, nil
	case string(EraChoiceLegacy), string(EraLegacy):
		return EraChoiceLegacy, nil
	case string(EraChoiceExtension), string(EraExtension):
		return EraChoiceExtension, nil
	}
	return "", &ParseError{What: "era", Value: s}
}

// ExtensionName is the extension identifier of the 2026-07-28 Tasks.
const ExtensionName = "io.modelcontextprotocol/tasks"

// Status is a task status as reported by the receiver.
type Status string

const (
	// StatusWorking means the receiver is executing the request.
	StatusWorking Status = "working"
	// StatusInputRequired means the receiver waits for input from the
	// requestor (an elicitation).
	StatusInputRequired Status = "input_required"
	// StatusCompleted is terminal: the request finished. In the legacy era
	// the result is a success; in the extension era it may be a tool error
	// (isError), see Outcome.ToolError.
	StatusCompleted Status = "completed"
	// StatusFailed is terminal. Legacy: a JSON-RPC error or an isError tool
	// result. Extension: a protocol (JSON-RPC) error only.
	StatusFailed Status = "failed"
	// StatusCancelled is terminal: the task was cancelled.
	StatusCancelled Status = "cancelled"
)

// Valid reports whether s is one of the five protocol statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Terminal reports whether s is completed, failed or cancelled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Task is a task handle as the receiver last described it, in either era.
type Task struct {
	// ID is the receiver-generated task id.
	ID string `json:"taskId"`
	// Status is the task status.
	Status Status `json:"status"`
	// StatusMessage is the receiver's human-readable message, sanitised:
	// control characters stripped and truncated to Limits.MaxStatusMessage.
	StatusMessage string `json:"statusMessage,omitempty"`
	// CreatedAt is when the receiver created the task (zero if unparseable).
	CreatedAt time.Time `json:"createdAt"`
	// LastUpdatedAt is the time of the last status change.
	LastUpdatedAt time.Time `json:"lastUpdatedAt"`
	// TTL is the granted lifetime from CreatedAt; nil means unlimited.
	TTL *time.Duration `json:"ttl,omitempty"`
	// PollInterval is the suggested interval between polls; zero when the
	// receiver suggested none.
	PollInterval time.Duration `json:"pollInterval,omitempty"`
	// Era is the wire shape the task was created with. A task id is only
	// meaningful in its own era.
	Era Era `json:"era"`
}

// ExpiresAt returns CreatedAt+TTL and true, or false when the TTL is
// unlimited or CreatedAt is unknown.
func (t Task) ExpiresAt() (time.Time, bool) {
	if t.TTL == nil || t.CreatedAt.IsZero() {
		return time.Time{}, false
	}
	return t.CreatedAt.Add(*t.TTL), true
}

// Snapshot is what one status observation (tasks/get) returned.
type Snapshot struct {
	// Task is the status and timing of the task.
	Task Task
	// Outcome is set in the extension era when the task is terminal: the
	// result or error is inlined in tasks/get. Legacy snapshots never carry
	// one; call Conn.AwaitOutcome.
	Outcome *Outcome
	// InputRequests are the extension era's unanswered input requests (keys
	// already answered through this Conn are left out). Legacy input arrives
	// through Options.OnInput instead.
	InputRequests []InputRequest
	// Violation is set when this observation breaks the task state machine
	// (see ValidateTransition). The observation itself is still reported.
	Violation *TransitionError
}

// Outcome is the protocol outcome of a terminal task, with its era's
// semantics recorded. It says nothing about the domain outcome, which the
// system of record confirms on its own.
type Outcome struct {
	// Status is the terminal task status.
	Status Status `json:"status"`
	// Era is the era whose semantics apply.
	Era Era `json:"era"`
	// Result is the tool result when the underlying call returned one.
	Result *ToolResult `json:"result,omitempty"`
	// Error is the JSON-RPC error the underlying call ended with.
	Error *RPCError `json:"error,omitempty"`
	// ToolError is true when the tool reported an isError result: legacy
	// "failed" with an isError result, extension "completed — tool error"
	// (and tolerated peers that report it as legacy "completed").
	ToolError bool `json:"toolError"`
	// Task is the last known task description, when one was observed.
	Task *Task `json:"task,omitempty"`
	// Violation is set when the status read that confirmed the outcome reported a change
	// the state machine forbids (e.g. a completed task reported working again).
	Violation *TransitionError `json:"-"`
}

// Describe returns the operator-facing label of the outcome, e.g.
// "completed", "completed — tool error", "failed — protocol error".
func (o Outcome) Describe() string {
	switch {
	case o.Status == StatusCompleted && o.ToolError:
		return "completed — tool error"
	case o.Status == StatusFailed && o.ToolError:
		return "failed — tool error"
	case o.Status == StatusFailed && o.Error != nil:
		return "failed — protocol error"
	}
	return string(o.Status)
}

// ToolResult is a bounded CallToolResult.
type ToolResult struct {
	// Content is the raw content array, at most Limits.MaxResult bytes.
	Content json.RawMessage `json:"content,omitempty"`
	// Structured is the raw structuredContent, if any.
	Structured json.RawMessage `json:"structuredContent,omitempty"`
	// IsError is the tool's isError flag.
	IsError bool `json:"isError"`
	// Size is the size in bytes of the result as received.
	Size int `json:"size"`
}

// Texts returns the text of every "text" content item, in order.
func (r *ToolResult) Texts() []string {
	if r == nil || len(r.Content) == 0 {
		return nil
	}
	var items []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(r.Content, &items) != nil {
		return nil
	}
	var out []string
	for _, it := range items {
		if it.Type == "text" {
			out = append(out, it.Text)
		}
	}
	return out
}

// InputMode is the elicitation mode of an input request.
type InputMode string

const (
	// InputForm asks for values matching RequestedSchema.
	InputForm InputMode = "form"
	// InputURL asks the user to visit URL out of band.
	InputURL InputMode = "url"
)

// SchemaField is one property of a form elicitation's requested schema:
// its name and JSON type only, never a value.
type SchemaField struct {
	// Name is the property name.
	Name string `json:"name"`
	// Type is the JSON Schema type ("string", "boolean", …), "" if absent.
	Type string `json:"type,omitempty"`
	// Required reports whether the schema lists the property as required.
	Required bool `json:"required,omitempty"`
}

// InputRequest is a request for input the receiver made for a task.
type InputRequest struct {
	// TaskID is the task the request serves.
	TaskID string `json:"taskId"`
	// Key identifies the request for AnswerInput. Extension: the
	// inputRequests map key. Legacy: a key minted by this client for the
	// server's elicitation/create request.
	Key string `json:"key"`
	// Method is the request method, e.g. "elicitation/create".
	Method string `json:"method"`
	// Mode is form or url for elicitations.
	Mode InputMode `json:"mode,omitempty"`
	// Message is the sanitised message shown to the person answering.
	Message string `json:"message,omitempty"`
	// RequestedSchema lists the form fields asked for.
	RequestedSchema []SchemaField `json:"requestedSchema,omitempty"`
	// RawSchema is the requested schema as received (bounded).
	RawSchema json.RawMessage `json:"rawSchema,omitempty"`
	// URL is the URL of a url-mode elicitation.
	URL string `json:"url,omitempty"`
	// ElicitationID is the url-mode elicitation id, if any.
	ElicitationID string `json:"elicitationId,omitempty"`
	// ExpiresAt is when a held 2025-11-25 request stops waiting for an answer (zero when
	// the server, not this client, holds the question: the extension era).
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// InputAction is the user's decision on an elicitation.
type InputAction string

const (
	// ActionAccept submits Content.
	ActionAccept InputAction = "accept"
	// ActionDecline refuses to provide the input.
	ActionDecline InputAction = "decline"
	// ActionCancel dismisses the request.
	ActionCancel InputAction = "cancel"
)

// InputResponse answers an InputRequest.
type InputResponse struct {
	// Action is accept, decline or cancel.
	Action InputAction `json:"action"`
	// Content holds the values for an accepted form elicitation.
	Content map[string]any `json:"content,omitempty"`
}

// TaskSupport is a tool's execution.taskSupport in the legacy era.
type TaskSupport string

const (
	// TaskForbidden: the tool must not be task-augmented (also when absent).
	TaskForbidden TaskSupport = "forbidden"
	// TaskOptional: the tool may be called either way.
	TaskOptional TaskSupport = "optional"
	// TaskRequired: the tool must be task-augmented.
	TaskRequired TaskSupport = "required"
	// TaskServerDecides is reported for every tool in the extension era,
	// where the server alone decides per call whether to return a task.
	TaskServerDecides TaskSupport = "server-decides"
)

// Tool is a tool definition as listed by the server.
type Tool struct {
	// Name is the tool name.
	Name string `json:"name"`
	// Title is the display title, if any.
	Title string `json:"title,omitempty"`
	// TaskSupport is execution.taskSupport ("forbidden" when absent).
	TaskSupport TaskSupport `json:"taskSupport"`
	// ReadOnlyHint is annotations.readOnlyHint, nil when absent.
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`
	// DestructiveHint is annotations.destructiveHint, nil when absent.
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	// IdempotentHint is annotations.idempotentHint, nil when absent.
	IdempotentHint *bool `json:"idempotentHint,omitempty"`
	// InputSchema is the raw input schema.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// Capabilities are the task-relevant server capabilities.
type Capabilities struct {
	// Known is false when the capabilities were not observed (a resumed
	// legacy session without stored capabilities).
	Known bool `json:"known"`
	// Tasks reports that capabilities.tasks is present (legacy).
	Tasks bool `json:"tasks"`
	// TasksList reports capabilities.tasks.list (legacy).
	TasksList bool `json:"tasksList"`
	// TasksCancel reports capabilities.tasks.cancel (legacy).
	TasksCancel bool `json:"tasksCancel"`
	// TasksToolsCall reports capabilities.tasks.requests.tools.call (legacy).
	TasksToolsCall bool `json:"tasksToolsCall"`
	// Extension reports capabilities.extensions["io.modelcontextprotocol/tasks"]
	// on a modern server that does not also advertise capabilities.tasks.
	Extension bool `json:"extension"`
	// Subscriptions reports that the modern server offers subscriptions/listen.
	Subscriptions bool `json:"subscriptions"`
}

// Evidence records how the era was decided: what was sent and what came back.
type Evidence struct {
	// Method is the probe request's method (server/discover or initialize).
	Method string `json:"method"`
	// Sent is the protocol version the probe offered.
	Sent string `json:"sent"`
	// HTTPStatus is the HTTP status of the probe (0 on stdio).
	HTTPStatus int `json:"httpStatus,omitempty"`
	// ErrorCode is the JSON-RPC error code of the answer, 0 for none.
	ErrorCode int `json:"errorCode,omitempty"`
	// Answer summarises the answer ("discover result", "error -32601", …).
	Answer string `json:"answer"`
	// SupportedVersions lists the versions the server offered, if any.
	SupportedVersions []string `json:"supportedVersions,omitempty"`
	// ModernServer is true when the answer was a modern one (a discover
	// result naming 2026-07-28, or a modern error body: -32022, and on HTTP
	// also -32021 or -32020), whatever Tasks era was then chosen.
	ModernServer bool `json:"modernServer,omitempty"`
	// Era is the conclusion.
	Era Era `json:"era"`
	// Forced is true when the caller chose the era and nothing was probed.
	Forced bool `json:"forced,omitempty"`
	// Cached is true when the conclusion came from a Detector cache hit.
	Cached bool `json:"cached,omitempty"`
	// At is when the probe ran.
	At time.Time `json:"at"`
}

// ServerInfo is what a connection learnt about its server.
type ServerInfo struct {
	// Era is the era in use.
	Era Era `json:"era"`
	// ProtocolVersion is the negotiated protocol version.
	ProtocolVersion string `json:"protocolVersion"`
	// Name is the server implementation name.
	Name string `json:"name,omitempty"`
	// Version is the server implementation version.
	Version string `json:"version,omitempty"`
	// SessionID is the legacy Streamable HTTP Mcp-Session-Id ("" otherwise).
	// Persist it to resume with Options.Resume.
	SessionID string `json:"sessionId,omitempty"`
	// RawCapabilities is the capabilities object exactly as received, for
	// hashing into a manifest.
	RawCapabilities json.RawMessage `json:"capabilities,omitempty"`
	// Capabilities are the decoded task-relevant flags.
	Capabilities Capabilities `json:"taskCapabilities"`
	// Evidence is how the era was decided.
	Evidence Evidence `json:"evidence"`
}

// TaskPage is one page of tasks/list.
type TaskPage struct {
	// Tasks are the tasks of the page.
	Tasks []Task
	// NextCursor is the cursor of the next page, "" on the last page.
	NextCursor string
}

// CancelResult is what a cancel request returned.
type CancelResult struct {
	// Task is the cancelled task (legacy era); nil in the extension era,
	// where cancel is only acknowledged and the caller polls on.
	Task *Task
	// Acknowledged is true in the extension era.
	Acknowledged bool
}

// CallResult is the result of a plain tools/call.
type CallResult struct {
	// Result is the tool result.
	Result *ToolResult
}
