package receiver

import (
	"maps"
	"net/http"
	"sync"
	"time"
)

// Fault is a set of faults applied to tools/call requests, for one tool or
// for all. The zero Fault injects nothing.
type Fault struct {
	// DropBeforeCreateResult creates the task, then drops the connection
	// without writing the CreateTaskResult (2025-11-25 and 2026-07-28 task
	// creation; on stdio the connection ends).
	DropBeforeCreateResult bool
	// DropAfterCreateResult writes the CreateTaskResult, then drops the
	// connection.
	DropAfterCreateResult bool
	// Delay holds every response to the matched requests this long.
	Delay time.Duration
	// Duplicate delivers the request twice: the handler runs twice (two
	// executions, two tasks where a task is created); the first answer is
	// returned. The system of record still shows one effect per key.
	Duplicate bool
}

// Knobs are the receiver's fault knobs and delivery switches. Tests set them
// through the Go API while the receiver serves; they apply to requests that
// arrive afterwards. All methods are safe for concurrent use.
type Knobs struct {
	mu              sync.Mutex
	global          Fault
	perTool         map[string]Fault
	refuseGetLeft   int
	refuseGetUntil  time.Time
	refuseGetStatus int
	refuseGetAfter  time.Duration
	inputOnGet      bool
	silent          bool
	askOnce         bool
	sseResponses    bool
	delayAll        time.Duration
}

func newKnobs() *Knobs { return &Knobs{perTool: map[string]Fault{}} }

// Set applies f to every tool.
func (k *Knobs) Set(f Fault) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.global = f
}

// SetTool applies f to calls of one tool; it takes precedence over Set.
func (k *Knobs) SetTool(tool string, f Fault) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.perTool[tool] = f
}

// RefuseTasksGet refuses the next n tasks/get calls (n > 0) and every call
// before until (non-zero). httpStatus 0 answers JSON-RPC -32603; a non-zero
// status (e.g. 503) answers with that HTTP status and no JSON-RPC body.
func (k *Knobs) RefuseTasksGet(n int, until time.Time, httpStatus int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refuseGetLeft, k.refuseGetUntil, k.refuseGetStatus, k.refuseGetAfter = n, until, httpStatus, 0
}

// ThrottleTasksGet answers the next n tasks/get calls (n > 0) and every call before until
// (non-zero) HTTP 429 Too Many Requests with Retry-After: retryAfter (whole seconds, at
// least 1), as an overloaded server asks its clients to slow down.
func (k *Knobs) ThrottleTasksGet(n int, until time.Time, retryAfter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refuseGetLeft, k.refuseGetUntil, k.refuseGetStatus, k.refuseGetAfter = n, until, http.StatusTooManyRequests, max(retryAfter, time.Second)
}

// DelayAll holds every MCP response (any method) this long.
func (k *Knobs) DelayAll(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.delayAll = d
}

// DeliverInputOnGetStream sends 2025-11-25 elicitation/create requests on the
// session's GET event stream instead of the tasks/result stream.
func (k *Knobs) DeliverInputOnGetStream(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.inputOnGet = on
}

// AskInputOnce sends each 2025-11-25 elicitation/create request of a task once only: a
// question whose stream ended is never delivered again, as a server that stopped waiting
// for it would do.
func (k *Knobs) AskInputOnce(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.askOnce = on
}

// askingOnce reports AskInputOnce.
func (k *Knobs) askingOnce() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.askOnce
}

// SSEResponses answers every 2025-11-25 POST request as an SSE stream
// instead of JSON (when the client accepts text/event-stream).
func (k *Knobs) SSEResponses(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sseResponses = on
}

// Reset clears every knob.
func (k *Knobs) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.global, k.perTool = Fault{}, map[string]Fault{}
	k.refuseGetLeft, k.refuseGetUntil, k.refuseGetStatus, k.refuseGetAfter = 0, time.Time{}, 0, 0
	k.inputOnGet, k.askOnce, k.sseResponses, k.delayAll = false, false, false, 0
}

func (k *Knobs) fault(tool string) Fault {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := k.perTool[tool]; ok {
		return f
	}
	return k.global
}

// refuseGet reports whether this tasks/get is refused, and how.
func (k *Knobs) refuseGet(now time.Time) (refuse bool, httpStatus int, retryAfter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refuseGetLeft > 0 {
		k.refuseGetLeft--
		return true, k.refuseGetStatus, k.refuseGetAfter
	}
	if !k.refuseGetUntil.IsZero() && now.Before(k.refuseGetUntil) {
		return true, k.refuseGetStatus, k.refuseGetAfter
	}
	return false, 0, 0
}

// SilenceStatus stops (on) or resumes status notifications (2025-11-25
// notifications/tasks/status, extension notifications/tasks): a server that
// sends them for some changes and not others, as notifications MUST NOT be
// relied on.
func (k *Knobs) SilenceStatus(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.silent = on
}

func (k *Knobs) silenced() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.silent
}

func (k *Knobs) flags() (inputOnGet, sse bool, delay time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.inputOnGet, k.sseResponses, k.delayAll
}

// Counters are what the receiver has seen and done, for tests to assert.
type Counters struct {
	// ToolCalls counts tools/call requests received, per tool name (each
	// MRTR round is a new request and counts).
	ToolCalls map[string]int
	// ToolCallsByKey counts tools/call requests received per idempotency key.
	ToolCallsByKey map[string]int
	// Executions counts tool handler runs per tool (Duplicate delivery runs
	// a handler twice for one request).
	Executions map[string]int
	// Methods counts MCP requests received per method.
	Methods map[string]int
	// Effects counts effects applied in the system of record.
	Effects int
	// EffectsRefused counts effects not applied because the key was already applied.
	EffectsRefused int
	// TasksCreated counts tasks created.
	TasksCreated int
	// TasksPurged counts tasks deleted after their ttl.
	TasksPurged int
	// InvalidTransitions counts status changes the state machine refused; it
	// stays 0 unless the receiver has a bug.
	InvalidTransitions int
	// Dropped counts connections dropped by a fault knob.
	Dropped int
	// RefusedGets counts tasks/get calls refused by a knob.
	RefusedGets int
}

type counters struct {
	mu sync.Mutex
	c  Counters
}

func newCounters() *counters {
	return &counters{c: Counters{ToolCalls: map[string]int{}, ToolCallsByKey: map[string]int{}, Executions: map[string]int{}, Methods: map[string]int{}}}
}

func (c *counters) add(f func(*Counters)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.c)
}

// Counters returns a snapshot of the receiver's counters.
func (r *Receiver) Counters() Counters {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	c := r.stats.c
	c.ToolCalls = maps.Clone(c.ToolCalls)
	c.ToolCallsByKey = maps.Clone(c.ToolCallsByKey)
	c.Executions = maps.Clone(c.Executions)
	c.Methods = maps.Clone(c.Methods)
	return c
}

// dropConn aborts the HTTP connection under w without a complete response.
func dropConn(w http.ResponseWriter) {
	if h, ok := w.(http.Hijacker); ok {
		if conn, _, err := h.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
