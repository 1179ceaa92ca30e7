// Package mcpclient is Taskgate's MCP requestor. It speaks both eras of MCP
// Tasks behind one interface, Conn: the experimental core Tasks of protocol
// revision 2025-11-25 ("legacy", built on github.com/mark3labs/mcp-go v1.2.1
// with the protocol pinned) and the 2026-07-28 extension
// io.modelcontextprotocol/tasks ("extension", built on net/http and on
// mcp-go's stdio framing).
//
// Callers speak of opening a connection, calling a tool plainly, creating a
// task, observing it, answering its input, awaiting its outcome, listing and
// cancelling tasks. They never see tasks/result, params.task, resultType or
// tasks/update: those are wire details of one era.
//
// Nothing a server sends is trusted: messages are bounded (Limits), status
// and error messages sanitised, every observed status checked against the
// state machine (ValidateTransition), and failures mapped to typed sentinels.
// The client never repeats a tools/call on its own: a task creation whose
// answer was not read fails with ErrCreateUnacknowledged.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Conn is a connection to one MCP server in one era. It is safe for
// concurrent use.
type Conn interface {
	// Info returns what the connection learnt about the server: era,
	// negotiated protocol version, implementation, session id, capabilities
	// and era evidence.
	Info() ServerInfo
	// Tools returns the tools listed when the connection opened (all pages).
	Tools() []Tool
	// RefreshTools lists the tools again, paging through tools/list.
	RefreshTools(ctx context.Context) ([]Tool, error)

	// CallTool calls a tool plainly (no task). It refuses (ErrToolRequiresTask)
	// a tool whose taskSupport is required. In the extension era it never
	// declares the tasks extension; a multi-round-trip input request is
	// answered through opts.Answer or returned as *InputRequiredError.
	CallTool(ctx context.Context, name string, args any, opts CallOptions) (*ToolResult, error)
	// CreateTask calls a tool on the task route and returns the created
	// task. It refuses (ErrTasksNotAdvertised, ErrToolForbidsTask) what the
	// server did not offer. A transport failure after the request may have
	// been sent returns ErrCreateUnacknowledged: never resend the call.
	CreateTask(ctx context.Context, name string, args any, opts TaskOptions) (Task, error)
	// GetTask observes the task's status once. The snapshot's Violation is
	// set when the status change breaks the state machine.
	GetTask(ctx context.Context, taskID string) (Snapshot, error)
	// AwaitOutcome blocks until the task is terminal and returns its
	// outcome, serving input requests through Options.OnInput meanwhile.
	// Cancelling ctx abandons the wait only (the task is untouched), so the
	// caller can go back to polling.
	AwaitOutcome(ctx context.Context, taskID string) (Outcome, error)
	// PendingInput lists the input requests of the task that wait for an
	// answer through this Conn.
	PendingInput(taskID string) []InputRequest
	// AnswerInput answers one input request, exactly once per key.
	AnswerInput(ctx context.Context, taskID, key string, resp InputResponse) error
	// ListTasks returns one page of the caller's tasks ("" = first page).
	// The extension era has no list: ErrNotSupported.
	ListTasks(ctx context.Context, cursor string) (TaskPage, error)
	// CancelTask asks the server to cancel the task. Legacy returns the
	// cancelled Task; the extension only acknowledges, and the caller polls
	// on to a terminal status.
	CancelTask(ctx context.Context, taskID string) (CancelResult, error)
	// Seed tells the state-machine validator the last status a caller
	// stored for a task, so a resumed watcher validates from there.
	Seed(taskID string, status Status)
	// Close releases the connection (and a stdio subprocess).
	Close() error
}

// MetaOperationID is the params._meta key that carries Taskgate's operation
// id on a tools/call (plain or task route). The reference receiver uses it as
// the idempotency key of the effect when the arguments carry none.
const MetaOperationID = "io.taskgate/operation-id"

// CallOptions tune one tools/call.
type CallOptions struct {
	// OperationID is Taskgate's operation id, sent as
	// params._meta["io.taskgate/operation-id"] in both eras; "" sends none.
	OperationID string
	// Meta is merged into params._meta. OperationID, when set, wins over a
	// MetaOperationID key here; the extension era's protocol keys win over both.
	Meta map[string]any
	// Answer answers multi-round-trip input requests of the extension era
	// (resultType input_required on tools/call). Nil: the call returns an
	// *InputRequiredError instead.
	Answer func(ctx context.Context, req InputRequest) (InputResponse, error)
	// MaxRounds bounds multi-round-trip retries (default 8).
	MaxRounds int
}

// TaskOptions tune a task-creating tools/call.
type TaskOptions struct {
	CallOptions
	// TTL is the requested lifetime (legacy task.ttl); zero requests none.
	// The granted TTL is in the returned Task and is the one that applies.
	// The extension has no requested TTL: the server sets ttlMs.
	TTL time.Duration
}

// InputRequiredError is returned by a plain extension-era call that needs
// input when no CallOptions.Answer was given.
type InputRequiredError struct {
	// Requests are the server's input requests.
	Requests []InputRequest
}

// Error implements error.
func (e *InputRequiredError) Error() string {
	return fmt.Sprintf("tools/call needs input (%d requests)", len(e.Requests))
}

// Resume restores a legacy Streamable HTTP session instead of initializing.
type Resume struct {
	// SessionID is the stored Mcp-Session-Id.
	SessionID string
	// Capabilities is the stored raw capabilities object; without it the
	// capability flags are unknown and task creation is refused.
	Capabilities json.RawMessage
	// ServerName and ServerVersion are the stored implementation info.
	ServerName, ServerVersion string
}

// Options configure Dial.
type Options struct {
	// URL is the Streamable HTTP endpoint. Exactly one of URL and Command.
	URL string
	// Command and Args start a stdio server as a subprocess.
	Command string
	// Args are the subprocess arguments.
	Args []string
	// Env is the subprocess environment (KEY=VALUE), appended to os.Environ.
	Env []string
	// Token is a bearer token sent as Authorization. Never logged.
	Token string
	// Era forces or auto-detects the era (default auto).
	Era EraChoice
	// Detector caches era conclusions per server; nil detects every time.
	Detector *Detector
	// Limits bound what is accepted from the server.
	Limits Limits
	// HTTPClient is used for HTTP; nil uses a shared pooled client
	// (NewHTTPClient), never http.DefaultClient.
	HTTPClient *http.Client
	// MaxRetryAfter bounds how long a server's 429 or 503 Retry-After holds this Conn's
	// requests back (default DefaultMaxRetryAfter). See ErrBackpressure.
	MaxRetryAfter time.Duration
	// Resume restores a legacy HTTP session (Mcp-Session-Id) instead of
	// initializing a new one.
	Resume *Resume
	// KeepSessionOnClose makes Close leave a 2025-11-25 Streamable HTTP
	// session alive at the server: no session-terminating DELETE is sent,
	// so a later Dial with Resume continues the session and the tasks bound
	// to it stay observable. Default false: Close ends the session (the
	// server may then forget its tasks). No effect in the extension era,
	// which has no sessions, or on stdio.
	KeepSessionOnClose bool
	// OnStatus receives status notifications (legacy notifications/tasks/status
	// on stdio and the HTTP GET stream; extension notifications/tasks). They
	// are hints: polling stays authoritative. Called from transport
	// goroutines; must not block for long.
	OnStatus func(Snapshot)
	// OnSubscribed receives the acknowledgement of each Subscribe stream
	// (extension era): the subscription id and the accepted task ids.
	// Called from transport goroutines; must not block for long.
	OnSubscribed func(Subscription)
	// OnInput is told about each new input request (legacy elicitation/create
	// with related-task _meta, extension inputRequests). Answer it with
	// Conn.AnswerInput, now or later. When nil, the client declares no
	// elicitation capability and refuses server requests.
	OnInput func(InputRequest)
	// InputWait bounds how long a legacy elicitation waits for AnswerInput
	// (default 10 minutes) when the request it arrived on carries no
	// WithInputWait; the request's deadline bounds it too. The server's
	// request is held that long, however long it is.
	InputWait time.Duration
	// DiscoverTimeout bounds the stdio server/discover probe (default 5 s).
	DiscoverTimeout time.Duration
	// ClientName and ClientVersion identify Taskgate (defaults "taskgate", "dev").
	ClientName, ClientVersion string
	// Logger receives structured logs; nil uses slog.Default(). Tokens and
	// elicited values are never logged.
	Logger *slog.Logger
}

var sharedHTTPClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(0) })

func (o *Options) normalize() error {
	if (o.URL == "") == (o.Command == "") {
		return fmt.Errorf("mcpclient: exactly one of URL and Command is required")
	}
	if o.Era == "" {
		o.Era = EraAuto
	}
	if _, err := ParseEraChoice(string(o.Era)); err != nil {
		return err
	}
	o.Limits = o.Limits.withDefaults()
	if o.HTTPClient == nil {
		o.HTTPClient = sharedHTTPClient()
	}
	o.HTTPClient = withBackpressure(o.HTTPClient, o.MaxRetryAfter) // this Conn's own Retry-After wait
	// A server's redirect is never followed: following one would send the requests, the session
	// and the bearer token to wherever its Location points.
	o.HTTPClient.CheckRedirect = refuseRedirect
	if o.InputWait <= 0 {
		o.InputWait = 10 * time.Minute
	}
	if o.DiscoverTimeout == 0 {
		o.DiscoverTimeout = 5 * time.Second
	}
	if o.ClientName == "" {
		o.ClientName = "taskgate"
	}
	if o.ClientVersion == "" {
		o.ClientVersion = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// serverKey names the server for the Detector cache.
func (o *Options) serverKey() string {
	if o.URL != "" {
		return o.URL
	}
	return "stdio:" + strings.Join(append([]string{o.Command}, o.Args...), " ")
}

// Dial opens a connection: it decides the era (probing unless forced or
// resuming), performs the era's handshake, reads the capabilities and pages
// through tools/list.
func Dial(ctx context.Context, opts Options) (Conn, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if opts.URL != "" {
		return dialHTTP(ctx, opts)
	}
	return dialStdio(ctx, opts)
}

// Detector caches the era concluded per server with its evidence. A cached
// conclusion only picks which handshake to try first; every new connection
// checks it again and a contradicted entry is replaced.
type Detector struct {
	mu      sync.Mutex
	entries map[string]Evidence
}

// NewDetector returns an empty cache.
func NewDetector() *Detector { return &Detector{entries: make(map[string]Evidence)} }

// Lookup returns the cached evidence for server (a URL or "stdio:COMMAND ARGS").
func (d *Detector) Lookup(server string) (Evidence, bool) {
	if d == nil {
		return Evidence{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ev, ok := d.entries[server]
	return ev, ok
}

// Record stores the evidence for server.
func (d *Detector) Record(server string, ev Evidence) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.entries == nil {
		d.entries = make(map[string]Evidence)
	}
	d.entries[server] = ev
}

// Forget drops the cached evidence for server.
func (d *Detector) Forget(server string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.entries, server)
}

// inputBroker tracks input requests per task for AnswerInput: pending
// requests, keys already answered (each key once across polls) and keys
// already announced to OnInput.
type inputBroker struct {
	onInput func(InputRequest)

	mu       sync.Mutex
	pending  map[string]*pendingInput // taskID \x00 key
	answered map[string]bool
	notified map[string]bool
}

type pendingInput struct {
	req InputRequest
	// Legacy only: the held server request takes the answer on answer (unbuffered, so the
	// handoff and the end of the hold never cross), reports on sent whether its response
	// reached the server, and closes gone when the hold ends unanswered.
	answer chan InputResponse
	sent   chan error
	gone   chan struct{}
	once   sync.Once
}

func inputKey(taskID, key string) string { return taskID + "\x00" + key }

// offer registers requests seen for a task (extension snapshots), announces
// the new ones and returns those not yet answered.
func (b *inputBroker) offer(taskID string, reqs []InputRequest) []InputRequest {
	b.mu.Lock()
	if b.pending == nil {
		b.pending, b.answered, b.notified = map[string]*pendingInput{}, map[string]bool{}, map[string]bool{}
	}
	// Requests no longer listed by the server are no longer pending.
	for k, p := range b.pending {
		if p.req.TaskID == taskID && p.answer == nil {
			delete(b.pending, k)
		}
	}
	var open, fresh []InputRequest
	for _, r := range reqs {
		k := inputKey(taskID, r.Key)
		if b.answered[k] {
			continue
		}
		open = append(open, r)
		b.pending[k] = &pendingInput{req: r}
		if !b.notified[k] {
			b.notified[k] = true
			fresh = append(fresh, r)
		}
	}
	b.mu.Unlock()
	if b.onInput != nil {
		for _, r := range fresh {
			b.onInput(r)
		}
	}
	return open
}

// register adds a legacy pending request held by a server request, under key (or key-2,
// key-3... when this Conn already took an answer for key: the server asked the same again).
func (b *inputBroker) register(r InputRequest, key string) *pendingInput {
	b.mu.Lock()
	if b.pending == nil {
		b.pending, b.answered, b.notified = map[string]*pendingInput{}, map[string]bool{}, map[string]bool{}
	}
	r.Key = key
	for n := 2; b.answered[inputKey(r.TaskID, r.Key)]; n++ {
		r.Key = key + "-" + strconv.Itoa(n)
	}
	k := inputKey(r.TaskID, r.Key)
	p := &pendingInput{req: r, answer: make(chan InputResponse), sent: make(chan error, 1), gone: make(chan struct{})}
	if prev := b.pending[k]; prev != nil && prev.gone != nil {
		prev.close() // delivered again on a new stream: the new request holds it
	}
	b.pending[k] = p
	b.notified[k] = true
	b.mu.Unlock()
	if b.onInput != nil {
		b.onInput(r)
	}
	return p
}

// close marks the hold ended.
func (p *pendingInput) close() { p.once.Do(func() { close(p.gone) }) }

// drop forgets a legacy pending request whose hold ended unanswered.
func (b *inputBroker) drop(p *pendingInput) {
	p.close()
	b.mu.Lock()
	defer b.mu.Unlock()
	k := inputKey(p.req.TaskID, p.req.Key)
	if b.pending[k] == p {
		delete(b.pending, k)
	}
}

// forget reverts the claim of a request whose hold ended before the answer was handed over:
// the key may be answered when the server asks again.
func (b *inputBroker) forget(p *pendingInput) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.answered, inputKey(p.req.TaskID, p.req.Key))
}

// list returns the pending requests of a task, sorted by key.
func (b *inputBroker) list(taskID string) []InputRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []InputRequest
	for _, p := range b.pending {
		if p.req.TaskID == taskID {
			out = append(out, p.req)
		}
	}
	sortInputs(out)
	return out
}

// claim marks taskID/key answered and returns its pending entry. It fails
// when the key was answered before or is not pending.
func (b *inputBroker) claim(taskID, key string) (*pendingInput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := inputKey(taskID, key)
	if b.answered[k] {
		return nil, fmt.Errorf("task %s input %q: %w", taskID, key, ErrInputAnswered)
	}
	p, ok := b.pending[k]
	if !ok {
		return nil, fmt.Errorf("task %s input %q: %w", taskID, key, ErrUnknownInput)
	}
	b.answered[k] = true
	delete(b.pending, k)
	return p, nil
}

// unclaim reverts claim after a failed delivery of the answer, so the caller
// may try again.
func (b *inputBroker) unclaim(p *pendingInput) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := inputKey(p.req.TaskID, p.req.Key)
	delete(b.answered, k)
	if p.gone != nil {
		select {
		case <-p.gone:
			return // the hold ended meanwhile
		default:
		}
	}
	if _, taken := b.pending[k]; !taken {
		b.pending[k] = p
	}
}

func sortInputs(in []InputRequest) {
	for i := 1; i < len(in); i++ {
		for j := i; j > 0 && in[j].Key < in[j-1].Key; j-- {
			in[j], in[j-1] = in[j-1], in[j]
		}
	}
}

// callMeta is the caller's params._meta of a tools/call: opts.Meta plus the
// operation id. It returns nil when there is nothing to send.
func callMeta(opts CallOptions) map[string]any {
	if len(opts.Meta) == 0 && opts.OperationID == "" {
		return nil
	}
	out := mergeMeta(opts.Meta, nil)
	if opts.OperationID != "" {
		out[MetaOperationID] = opts.OperationID
	}
	return out
}

// mergeMeta returns a copy of meta with extra merged in.
func mergeMeta(meta map[string]any, extra map[string]any) map[string]any {
	out := make(map[string]any, len(meta)+len(extra))
	for k, v := range meta {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// findTool looks a tool up by name.
func findTool(tools []Tool, name string) (Tool, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// errIsTransport reports whether err means the transport failed (as opposed
// to an answer from the server).
// readAgain runs a request that only reads task state and, when it failed because a kept-alive
// connection was found dead (the server closed it between requests: reset, broken pipe, EOF
// before any answer), runs it once more on a fresh connection. Repeating a read is harmless;
// tools/call and tasks/cancel never go through here.
func readAgain(ctx context.Context, read func() (json.RawMessage, error)) (json.RawMessage, error) {
	raw, err := read()
	if err != nil && staleConnection(err) && ctx.Err() == nil {
		return read()
	}
	return raw, err
}

// staleConnection reports whether err is a connection the server had already closed.
func staleConnection(err error) bool {
	if !errors.Is(err, ErrTransportLost) && !errors.Is(err, ErrNotDelivered) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// mcp-go's transport flattens some errors into text.
	msg := err.Error()
	return strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "broken pipe") || strings.HasSuffix(msg, ": EOF")
}

func errIsTransport(err error) bool {
	return errors.Is(err, ErrTransportLost) || errors.Is(err, ErrNotDelivered) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// createFailure turns a task-creation failure into ErrCreateUnacknowledged
// when the request may have reached the server unanswered.
func createFailure(tool string, err error) error {
	if errors.Is(err, ErrNotDelivered) {
		return fmt.Errorf("create task with %s: %w", tool, err)
	}
	if errors.Is(err, ErrTransportLost) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("create task with %s: %w: %w", tool, ErrCreateUnacknowledged, err)
	}
	return fmt.Errorf("create task with %s: %w", tool, err)
}

// pollDelay returns how long to wait before the next poll.
func pollDelay(t Task, attempt int) time.Duration {
	const floor = 50 * time.Millisecond
	if t.PollInterval > 0 {
		return max(t.PollInterval, floor)
	}
	d := 250 * time.Millisecond << min(attempt, 4)
	return min(d, 5*time.Second)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
