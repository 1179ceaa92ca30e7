package mcpclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The legacy era speaks Streamable HTTP (Mcp-Session-Id, MCP-Protocol-Version) with net/http
// (legacyHTTP, httpRPC): every answer, SSE event and server request passes the size cap before
// it is decoded, and a server request on a response stream is held as long as its caller allows
// rather than for mcp-go's fixed 30 s handler timeout. Stdio rides on mcp-go v1.2.1's
// transport. mcp-go's client.Client is not used: it probes server/discover first unless pinned,
// its CallTool parser rejects a CreateTaskResult, and it re-encodes the capabilities through its
// structs, losing the raw object a manifest hashes. So the handshake is sent here, pinned to
// 2025-11-25, with string request ids ("tg-N"), and every answer is decoded and bounded here.

const (
	metaRelatedTask    = "io.modelcontextprotocol/related-task"
	headerSessionID    = "Mcp-Session-Id"
	headerProtoVersion = "MCP-Protocol-Version"
)

// legacyConn speaks 2025-11-25 Tasks.
type legacyConn struct {
	opts    Options
	tr      transport.Interface
	isHTTP  bool
	info    ServerInfo
	ids     atomic.Int64
	tracker statusTracker
	inputs  inputBroker
	rpc     *httpRPC // HTTP only: tasks/get sent with net/http directly (see callHTTP)

	toolsMu sync.RWMutex
	tools   []Tool
	dropped []DroppedTool

	life   context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	wg     sync.WaitGroup

	// getSettled is closed once the first standalone GET stream was
	// accepted or refused (HTTP only); Dial waits for it.
	getSettled chan struct{}
	settleOnce sync.Once
	// getOpen is true while the standalone GET stream is open; getNotified once a
	// notifications/tasks/status arrived on the stream open now (see NotifiesStatus).
	getOpen, getNotified atomic.Bool
}

// settleGet marks the first GET stream attempt as answered.
func (c *legacyConn) settleGet() {
	c.settleOnce.Do(func() { close(c.getSettled) })
}

// newLegacy wires handlers on an unstarted-or-started transport.
func newLegacy(opts Options, tr transport.Interface, isHTTP bool, life context.Context, cancel context.CancelFunc) *legacyConn {
	c := &legacyConn{opts: opts, tr: tr, isHTTP: isHTTP, life: life, cancel: cancel, getSettled: make(chan struct{})}
	if isHTTP {
		c.rpc = &httpRPC{url: opts.URL, client: opts.HTTPClient, token: opts.Token, lim: opts.Limits, resume: true}
	}
	c.inputs.onInput = opts.OnInput
	tr.SetNotificationHandler(c.onNotification)
	if bi, ok := tr.(transport.BidirectionalInterface); ok {
		bi.SetRequestHandler(c.onRequest)
	}
	return c
}

// clientCapabilities are those declared in initialize.
func (c *legacyConn) clientCapabilities() map[string]any {
	caps := map[string]any{}
	if c.opts.OnInput != nil {
		caps["elicitation"] = map[string]any{"form": map[string]any{}, "url": map[string]any{}}
	}
	return caps
}

// handshake sends initialize pinned to 2025-11-25, then notifications/initialized.
func (c *legacyConn) handshake(ctx context.Context, ev Evidence) error {
	params := map[string]any{
		"protocolVersion": string(EraLegacy),
		"capabilities":    c.clientCapabilities(),
		"clientInfo":      map[string]any{"name": c.opts.ClientName, "version": c.opts.ClientVersion},
	}
	raw, err := c.call(ctx, "initialize", params)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var res struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ServerInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"serverInfo"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("initialize: %w: %w", ErrMalformed, err)
	}
	if strings.TrimSpace(res.ProtocolVersion) == "" {
		return fmt.Errorf("initialize: %w: the result names no protocolVersion", ErrMalformed)
	}
	caps, err := decodeCapabilities(res.Capabilities, EraLegacy)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if res.ProtocolVersion != string(EraLegacy) {
		// Tasks exist only when both sides negotiated 2025-11-25: an older
		// answer leaves every task capability off, never silently on.
		caps = Capabilities{Known: true}
	}
	if hc, ok := c.tr.(transport.HTTPConnection); ok {
		hc.SetProtocolVersion(res.ProtocolVersion)
	}
	note := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION, Notification: mcp.Notification{Method: "notifications/initialized"}}
	if err := c.tr.SendNotification(ctx, note); err != nil {
		return fmt.Errorf("notifications/initialized: %w", c.mapTransportErr(err))
	}
	ev.Era = EraLegacy
	c.info = ServerInfo{
		Era: EraLegacy, ProtocolVersion: res.ProtocolVersion,
		Name: SanitizeMessage(res.ServerInfo.Name, 256), Version: SanitizeMessage(res.ServerInfo.Version, 128),
		SessionID: c.tr.GetSessionId(), RawCapabilities: res.Capabilities, Capabilities: caps, Evidence: ev,
	}
	return nil
}

// resume restores a stored session without initialize.
func (c *legacyConn) resume(r *Resume, ev Evidence) error {
	caps := Capabilities{}
	if len(r.Capabilities) > 0 {
		var err error
		if caps, err = decodeCapabilities(r.Capabilities, EraLegacy); err != nil {
			return fmt.Errorf("resume: stored capabilities: %w", err)
		}
	}
	if hc, ok := c.tr.(transport.HTTPConnection); ok {
		hc.SetProtocolVersion(string(EraLegacy))
	}
	ev.Era = EraLegacy
	c.info = ServerInfo{
		Era: EraLegacy, ProtocolVersion: string(EraLegacy), Name: r.ServerName, Version: r.ServerVersion,
		SessionID: r.SessionID, RawCapabilities: r.Capabilities, Capabilities: caps, Evidence: ev,
	}
	return nil
}

// call sends one request and returns its raw result or a mapped error.
func (c *legacyConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, err)
	}
	if c.rpc != nil {
		return c.callHTTP(ctx, method, params)
	}
	id := fmt.Sprintf("tg-%d", c.ids.Add(1))
	resp, err := c.tr.SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(id), Method: method, Params: params,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, c.mapTransportErr(err))
	}
	if resp == nil {
		return nil, fmt.Errorf("%s: %w: no response", method, ErrTransportLost)
	}
	if resp.Error != nil {
		rpc := &RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
		if resp.Error.Data != nil {
			rpc.Data, _ = json.Marshal(resp.Error.Data)
		}
		rpc = sanitizeRPCError(rpc, c.opts.Limits)
		if c.isHTTP && c.tr.GetSessionId() != "" && rpc.Code == -32000 && strings.Contains(strings.ToLower(rpc.Message), "session") {
			// Tolerated peer: the TypeScript SDK's example servers (and
			// server-everything) answer a forgotten Mcp-Session-Id with
			// HTTP 400 and -32000 "No valid session ID provided" instead of
			// the 404 the transport spec requires.
			return nil, fmt.Errorf("%s: %w: %w", method, ErrSessionGone, rpc)
		}
		return nil, fmt.Errorf("%s: %w", method, mapRPCError(method, rpc))
	}
	if len(resp.Result) > c.opts.Limits.MaxMessage {
		return nil, fmt.Errorf("%s: %w: %d bytes", method, ErrResultTooLarge, len(resp.Result))
	}
	return resp.Result, nil
}

// taskParams are the params of tasks/get.
type taskParams struct {
	TaskID string `json:"taskId"`
}

// callHTTP sends one request on the session with net/http: every byte of the answer passes
// the size cap before it is decoded (httpRPC.post), and tasks/get, the watchers' hot path,
// costs about half the allocations of mcp-go's transport. Errors map as in call: a 404 (or the
// tolerated 400/-32000) is ErrSessionGone. Notifications and server requests arriving on an
// SSE answer are served as on the GET stream; a server request is held for as long as ctx
// allows (see serve), not for a fixed handler timeout.
func (c *legacyConn) callHTTP(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, err)
	}
	id := "tg-" + strconv.FormatInt(c.ids.Add(1), 10)
	body, err := encodeRequest(id, method, params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, err)
	}
	hdr := make(http.Header, 4)
	c.sessionHeaders(hdr)
	for k, v := range ctxParamHeaders(ctx) {
		hdr[k] = v
	}
	rep, err := c.rpc.post(ctx, id, body, hdr, func(m *wireMessage) { c.onStreamMessage(ctx, m) })
	if method == "initialize" && err == nil {
		if sid := rep.header.Get(headerSessionID); sid != "" {
			if s, ok := c.tr.(*legacyHTTP); ok {
				s.setSession(sid)
			}
		}
	}
	if rep.status == http.StatusNotFound && c.tr.GetSessionId() != "" {
		return nil, fmt.Errorf("%s: %w: HTTP 404", method, ErrSessionGone)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if rep.msg == nil {
		return nil, fmt.Errorf("%s: %w: HTTP %d without a response", method, ErrTransportLost, rep.status)
	}
	if rep.msg.Error != nil {
		rpc := sanitizeRPCError(rep.msg.Error, c.opts.Limits)
		if c.tr.GetSessionId() != "" && rpc.Code == -32000 && strings.Contains(strings.ToLower(rpc.Message), "session") {
			return nil, fmt.Errorf("%s: %w: %w", method, ErrSessionGone, rpc)
		}
		return nil, fmt.Errorf("%s: %w", method, mapRPCError(method, rpc))
	}
	if len(rep.msg.Result) > c.opts.Limits.MaxMessage {
		return nil, fmt.Errorf("%s: %w: %d bytes", method, ErrResultTooLarge, len(rep.msg.Result))
	}
	return rep.msg.Result, nil
}

// onStreamMessage handles a notification or server request that arrived on the SSE answer
// of a callHTTP request made with ctx: the server request is held until it is answered, ctx
// ends (the caller stopped waiting for that answer) or the connection closes.
func (c *legacyConn) onStreamMessage(ctx context.Context, m *wireMessage) {
	switch {
	case m.isNotification() && m.Method == "notifications/tasks/status":
		c.deliverStatus(m.Params)
	case m.isRequest():
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			hold, stop := context.WithCancel(ctx)
			defer stop()
			defer context.AfterFunc(c.life, stop)()
			c.serveAndRespond(hold, m)
		}()
	}
}

// serveAndRespond serves one server request and POSTs the answer, unless the hold ended
// without one (the server keeps the request and delivers it again on a new stream).
func (c *legacyConn) serveAndRespond(ctx context.Context, m *wireMessage) {
	result, rpcErr, sent := c.serve(ctx, m.Method, m.Params)
	if sent == nil {
		if result != nil || rpcErr != nil {
			_ = c.respond(m.ID, result, rpcErr)
		}
		return
	}
	sent <- c.respond(m.ID, result, rpcErr)
}

// mapTransportErr maps mcp-go transport errors to this package's sentinels.
func (c *legacyConn) mapTransportErr(err error) error {
	if p, ok := c.tr.(*stdioProc); ok {
		err = p.overLimit(err)
	}
	var authErr *transport.AuthorizationRequiredError
	switch {
	case errors.Is(err, transport.ErrSessionTerminated), errors.Is(err, transport.ErrLegacySSEServer):
		return fmt.Errorf("%w: %w", ErrSessionGone, err)
	case errors.As(err, &authErr), errors.Is(err, transport.ErrUnauthorized):
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	case errors.Is(err, transport.ErrTransportClosed):
		return fmt.Errorf("%w: %w", ErrTransportLost, err)
	}
	return classifySendError(true, err)
}

func (c *legacyConn) Info() ServerInfo {
	info := c.info
	if sid := c.tr.GetSessionId(); sid != "" {
		info.SessionID = sid
	}
	return info
}

func (c *legacyConn) Tools() []Tool {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return append([]Tool(nil), c.tools...)
}

func (c *legacyConn) RefreshTools(ctx context.Context) ([]Tool, error) {
	tools, err := listAllTools(ctx, EraLegacy, func(ctx context.Context, params map[string]any) (json.RawMessage, error) {
		return c.call(ctx, "tools/list", params)
	})
	if err != nil {
		return nil, err
	}
	tools, dropped := dropInvalidTools(tools)
	logDropped(c.opts, dropped)
	c.toolsMu.Lock()
	c.tools, c.dropped = tools, dropped
	c.toolsMu.Unlock()
	return append([]Tool(nil), tools...), nil
}

// DroppedTools lists the tools left out of Tools, and why.
func (c *legacyConn) DroppedTools() []DroppedTool {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return append([]DroppedTool(nil), c.dropped...)
}

// listAllTools pages through tools/list, refusing a cursor that repeats.
func listAllTools(ctx context.Context, era Era, call func(context.Context, map[string]any) (json.RawMessage, error)) ([]Tool, error) {
	var all []Tool
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page >= 1000 {
			return nil, fmt.Errorf("tools/list: %w: more than 1000 pages", ErrMalformed)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := call(ctx, params)
		if err != nil {
			return nil, err
		}
		tools, next, err := decodeTools(raw, era)
		if err != nil {
			return nil, err
		}
		all = append(all, tools...)
		if next == "" {
			return all, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("tools/list: %w: cursor %q repeats", ErrMalformed, truncate(next, 64))
		}
		seen[next] = true
		cursor = next
	}
}

func (c *legacyConn) tool(name string) (Tool, bool) {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return findTool(c.tools, name)
}

func (c *legacyConn) CallTool(ctx context.Context, name string, args any, opts CallOptions) (*ToolResult, error) {
	if t, ok := c.tool(name); ok && t.TaskSupport == TaskRequired {
		return nil, fmt.Errorf("call %s: %w", name, ErrToolRequiresTask)
	}
	params := map[string]any{"name": name, "arguments": argsOrEmpty(args)}
	if meta := callMeta(opts); meta != nil {
		params["_meta"] = meta
	}
	if t, ok := c.tool(name); ok {
		ctx = withParamHeaders(ctx, paramHeaders(t, args))
	}
	raw, err := c.call(ctx, "tools/call", params)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	res, err := decodeToolResult(raw, c.opts.Limits)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	return res, nil
}

func argsOrEmpty(args any) any {
	if args == nil {
		return map[string]any{}
	}
	if raw, ok := args.(json.RawMessage); ok && len(raw) == 0 {
		return map[string]any{}
	}
	return args
}

func (c *legacyConn) CreateTask(ctx context.Context, name string, args any, opts TaskOptions) (Task, error) {
	caps := c.info.Capabilities
	if !caps.Known || !caps.TasksToolsCall {
		return Task{}, fmt.Errorf("create task with %s: %w", name, ErrTasksNotAdvertised)
	}
	t, ok := c.tool(name)
	if !ok {
		return Task{}, fmt.Errorf("create task with %s: %w", name, ErrUnknownTool)
	}
	if t.TaskSupport != TaskOptional && t.TaskSupport != TaskRequired {
		return Task{}, fmt.Errorf("create task with %s: %w", name, ErrToolForbidsTask)
	}
	taskParam := map[string]any{}
	if opts.TTL > 0 {
		taskParam["ttl"] = opts.TTL.Milliseconds()
	}
	params := map[string]any{"name": name, "arguments": argsOrEmpty(args), "task": taskParam}
	if meta := callMeta(opts.CallOptions); meta != nil {
		params["_meta"] = meta
	}
	ctx = withParamHeaders(ctx, paramHeaders(t, args))
	raw, err := c.call(ctx, "tools/call", params)
	if err != nil {
		return Task{}, createFailure(name, err)
	}
	task, err := decodeLegacyCreate(raw, c.opts.Limits)
	if err != nil {
		return Task{}, fmt.Errorf("create task with %s: %w", name, err)
	}
	_ = c.tracker.observe(task.ID, task.Status)
	return task, nil
}

func (c *legacyConn) GetTask(ctx context.Context, taskID string) (Snapshot, error) {
	var raw json.RawMessage
	var err error
	sent := c.tracker.sent()
	raw, err = readAgain(ctx, func() (json.RawMessage, error) {
		if c.rpc != nil {
			return c.callHTTP(ctx, "tasks/get", taskParams{TaskID: taskID})
		}
		return c.call(ctx, "tasks/get", map[string]any{"taskId": taskID})
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("task %s: %w", taskID, err)
	}
	t, err := decodeTask(raw, EraLegacy, c.opts.Limits)
	if err != nil {
		return Snapshot{}, fmt.Errorf("task %s: %w", taskID, err)
	}
	if t.ID != taskID {
		return Snapshot{}, &TaskIDChangedError{Asked: taskID, Answered: t.ID, Status: t.Status}
	}
	v, stale := c.tracker.answer(taskID, t.Status, sent)
	if stale { // answered before the terminal status now known: read again
		return c.GetTask(ctx, taskID)
	}
	s := Snapshot{Task: t, InputRequests: c.inputs.list(taskID), Violation: v}
	return s, nil
}

// AwaitOutcome calls tasks/result, which blocks until the task is terminal
// and carries the server's elicitation requests meanwhile, then tasks/get
// for the terminal status.
func (c *legacyConn) AwaitOutcome(ctx context.Context, taskID string) (Outcome, error) {
	return c.awaitOutcome(ctx, taskID, true)
}

// awaitOutcome reads tasks/result. A server that answers it with an error
// while the task is still running (instead of blocking, as 2025-11-25 asks)
// is tolerated once: tasks/get is polled until the task is terminal and the
// result is read again. The tool call itself is never repeated.
func (c *legacyConn) awaitOutcome(ctx context.Context, taskID string, tolerate bool) (Outcome, error) {
	raw, err := readAgain(ctx, func() (json.RawMessage, error) {
		return c.call(ctx, "tasks/result", map[string]any{"taskId": taskID})
	})
	var rpc *RPCError
	switch {
	case err == nil:
	case errIsTransport(err), !errors.As(err, &rpc):
		return Outcome{}, fmt.Errorf("task %s result: %w", taskID, err)
	case errors.Is(err, ErrUnknownTask):
		// -32602 is both "unknown task" and what a tool that failed with
		// invalid params returns through tasks/result: only a task that
		// tasks/get still knows, terminal, owns the error.
		if snap, gerr := c.GetTask(ctx, taskID); gerr != nil || !snap.Task.Status.Terminal() {
			return Outcome{}, fmt.Errorf("task %s result: %w", taskID, err)
		}
	}
	out := Outcome{Era: EraLegacy}
	if rpc != nil {
		out.Error = rpc
	} else {
		if rerr := checkRelatedResult(taskID, raw); rerr != nil {
			return Outcome{}, fmt.Errorf("task %s result: %w", taskID, rerr)
		}
		res, derr := decodeToolResult(raw, c.opts.Limits)
		if derr != nil {
			return Outcome{}, fmt.Errorf("task %s result: %w", taskID, derr)
		}
		out.Result = res
		out.ToolError = res.IsError
	}
	// The result carries no status: read it. A JSON-RPC error from
	// tasks/result counts as the task's own only when the task is terminal
	// (server-everything answers -32603 on a cancelled task).
	snap, gerr := c.GetTask(ctx, taskID)
	if gerr == nil {
		out.Violation = snap.Violation
	}
	switch {
	case gerr == nil && snap.Task.Status.Terminal():
		out.Status = snap.Task.Status
		t := snap.Task
		out.Task = &t
	case gerr == nil:
		if rpc != nil && tolerate {
			c.opts.Logger.Info("mcpclient: tasks/result answered before the task ended; polling tasks/get",
				"server", c.opts.serverKey(), "task", taskID, "status", snap.Task.Status)
			if perr := c.pollTerminal(ctx, taskID, snap); perr != nil {
				return Outcome{}, fmt.Errorf("task %s result: %w", taskID, perr)
			}
			return c.awaitOutcome(ctx, taskID, false)
		}
		if rpc != nil {
			return Outcome{}, fmt.Errorf("task %s result: %w (task still %s)", taskID, err, snap.Task.Status)
		}
		// A result before a terminal status: trust the result, the status
		// will follow; report what the result implies.
		out.Status = impliedStatus(out)
	default:
		out.Status = impliedStatus(out)
	}
	return out, nil
}

// pollTerminal polls tasks/get at the suggested interval (250 ms when none,
// at most 5 s) until the task is terminal or ctx ends.
func (c *legacyConn) pollTerminal(ctx context.Context, taskID string, snap Snapshot) error {
	for !snap.Task.Status.Terminal() {
		d := snap.Task.PollInterval
		if d <= 0 {
			d = 250 * time.Millisecond
		}
		if err := sleepCtx(ctx, min(d, 5*time.Second)); err != nil {
			return err
		}
		var err error
		if snap, err = c.GetTask(ctx, taskID); err != nil {
			return err
		}
	}
	return nil
}

// impliedStatus is the legacy status a result implies when tasks/get could
// not confirm it: a JSON-RPC error or isError result means failed.
func impliedStatus(o Outcome) Status {
	if o.Error != nil || o.ToolError {
		return StatusFailed
	}
	return StatusCompleted
}

func (c *legacyConn) PendingInput(taskID string) []InputRequest { return c.inputs.list(taskID) }

func (c *legacyConn) AnswerInput(ctx context.Context, taskID, key string, resp InputResponse) error {
	p, err := c.inputs.claim(taskID, key)
	if err != nil {
		return err
	}
	if p.answer == nil {
		c.inputs.unclaim(p)
		return fmt.Errorf("task %s input %q: %w", taskID, key, ErrUnknownInput)
	}
	select {
	case p.answer <- resp:
	case <-p.gone:
		c.inputs.forget(p)
		return fmt.Errorf("task %s input %q: %w", taskID, key, ErrUnknownInput)
	case <-ctx.Done():
		c.inputs.unclaim(p)
		return ctx.Err()
	}
	// The held request now carries the answer: wait until the server took it.
	select {
	case err := <-p.sent:
		if err != nil {
			return fmt.Errorf("task %s input %q: the answer did not reach the server: %w", taskID, key, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("task %s input %q: %w: %w", taskID, key, ErrTransportLost, ctx.Err())
	}
}

func (c *legacyConn) ListTasks(ctx context.Context, cursor string) (TaskPage, error) {
	if caps := c.info.Capabilities; caps.Known && !caps.TasksList {
		return TaskPage{}, fmt.Errorf("tasks/list: %w: server did not declare tasks.list", ErrNotSupported)
	}
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	raw, err := c.call(ctx, "tasks/list", params)
	if err != nil {
		return TaskPage{}, err
	}
	page, err := decodeTaskPage(raw, c.opts.Limits)
	if err != nil {
		return TaskPage{}, err
	}
	if page.NextCursor != "" && page.NextCursor == cursor {
		return TaskPage{}, fmt.Errorf("tasks/list: %w: cursor did not advance", ErrMalformed)
	}
	return page, nil
}

func (c *legacyConn) CancelTask(ctx context.Context, taskID string) (CancelResult, error) {
	if caps := c.info.Capabilities; caps.Known && !caps.TasksCancel {
		return CancelResult{}, fmt.Errorf("cancel task %s: %w: server did not declare tasks.cancel", taskID, ErrNotSupported)
	}
	raw, err := c.call(ctx, "tasks/cancel", map[string]any{"taskId": taskID})
	if err != nil {
		var rpc *RPCError
		if errors.Is(err, ErrUnknownTask) && errors.As(err, &rpc) {
			// -32602 also answers a cancel of a terminal task: ask.
			if snap, gerr := c.GetTask(ctx, taskID); gerr == nil && snap.Task.Status.Terminal() {
				t := snap.Task
				return CancelResult{Task: &t}, fmt.Errorf("cancel task %s: %w (%s): %w", taskID, ErrTaskTerminal, t.Status, rpc)
			}
		}
		return CancelResult{}, fmt.Errorf("cancel task %s: %w", taskID, err)
	}
	t, err := decodeTask(raw, EraLegacy, c.opts.Limits)
	if err != nil {
		return CancelResult{}, fmt.Errorf("cancel task %s: %w", taskID, err)
	}
	_ = c.tracker.observe(taskID, t.Status)
	return CancelResult{Task: &t}, nil
}

func (c *legacyConn) Seed(taskID string, status Status) { c.tracker.seed(taskID, status) }

func (c *legacyConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.cancel()
	err := c.tr.Close()
	c.wg.Wait()
	return err
}

// onNotification handles server notifications from any stream.
func (c *legacyConn) onNotification(n mcp.JSONRPCNotification) {
	if n.Method != "notifications/tasks/status" || c.opts.OnStatus == nil {
		return
	}
	raw, err := json.Marshal(n.Params)
	if err != nil {
		return
	}
	c.deliverStatus(raw)
}

// deliverStatus decodes a status notification's params (tolerating an empty
// or extra _meta) and hands it to OnStatus.
func (c *legacyConn) deliverStatus(params json.RawMessage) {
	if c.opts.OnStatus == nil {
		return
	}
	t, err := decodeTask(params, EraLegacy, c.opts.Limits)
	if err != nil {
		c.opts.Logger.Warn("mcpclient: dropped malformed task status notification", "err", err)
		return
	}
	v, stale := c.tracker.notified(t.ID, t.Status)
	if stale {
		return
	}
	c.opts.OnStatus(Snapshot{Task: t, Violation: v})
}

// onRequest answers server requests arriving on POST response streams (and,
// on stdio, on the pipe).
func (c *legacyConn) onRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	params, _ := json.Marshal(req.Params)
	result, rpcErr, sent := c.serve(ctx, req.Method, params)
	if sent != nil {
		// The transport writes the answer to the pipe: taken as delivered.
		sent <- nil
	}
	switch {
	case rpcErr != nil:
		return transport.NewJSONRPCErrorResponse(req.ID, rpcErr.Code, rpcErr.Message, nil), nil
	case result != nil:
		return transport.NewJSONRPCResultResponse(req.ID, result), nil
	}
	return nil, nil // the hold ended unanswered: no answer is written
}

// serve handles one server request: ping, and elicitation/create routed by its related-task
// _meta to the input broker, held until AnswerInput answers it. The hold lasts until the
// input's deadline (WithInputWait on the request's context, else Options.InputWait, both
// bounded by the context's deadline), or until ctx ends. An answer is returned with the
// channel on which the caller reports whether it reached the server. At the deadline the
// server is told no answer came; when ctx ends first nothing is returned or sent, so the
// server keeps the request for the next stream (a restarted console, another replica).
func (c *legacyConn) serve(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, *RPCError, chan<- error) {
	switch method {
	case "ping":
		return json.RawMessage(`{}`), nil, nil
	case "elicitation/create":
	default:
		return nil, &RPCError{Code: CodeMethodNotFound, Message: "method not supported by this client: " + truncate(method, 64)}, nil
	}
	if c.opts.OnInput == nil {
		return nil, &RPCError{Code: CodeMethodNotFound, Message: "this client does not accept elicitation"}, nil
	}
	var meta struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(params, &meta)
	var related struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(meta.Meta[metaRelatedTask], &related)
	if related.TaskID != "" && !c.tracker.awaitKnown(ctx, related.TaskID) {
		c.opts.Logger.Warn("mcpclient: elicitation refused", "server", c.opts.serverKey(), "err", &RelatedTaskError{Named: truncate(related.TaskID, 80)})
		return nil, &RPCError{Code: CodeInvalidParams, Message: "the elicitation names a task this client does not know"}, nil
	}
	req, err := decodeInputParams(related.TaskID, "", method, params, c.opts.Limits)
	if err != nil {
		return nil, &RPCError{Code: CodeInvalidParams, Message: "invalid elicitation params"}, nil
	}
	wait := c.opts.InputWait
	if d, ok := ctx.Value(inputWaitKey{}).(time.Duration); ok && d > 0 {
		wait = d
	}
	until := time.Now().Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	req.ExpiresAt = until.UTC()
	p := c.inputs.register(req, inputFingerprint(related.TaskID, method, params))
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case ans := <-p.answer:
		out := map[string]any{"action": string(ans.Action)}
		if ans.Action == ActionAccept {
			out["content"] = ans.Content
		}
		raw, _ := json.Marshal(out)
		return raw, nil, p.sent
	case <-timer.C:
		c.inputs.drop(p)
		return nil, &RPCError{Code: CodeInternalError, Message: "no answer to the elicitation in time"}, nil
	case <-ctx.Done():
	case <-c.life.Done():
	}
	c.inputs.drop(p)
	return nil, nil, nil
}

// inputWaitKey carries WithInputWait's duration.
type inputWaitKey struct{}

// WithInputWait returns ctx with how long a 2025-11-25 elicitation that arrives on a request
// made with it (tasks/result) is held for an answer; the context's deadline bounds it too.
// Without it Options.InputWait applies.
func WithInputWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, inputWaitKey{}, d)
}

// inputFingerprint names a server request by what it asks: a server that delivers a queued
// elicitation again on a new stream (with a new JSON-RPC id) asks the same question under the
// same key, so a question stored before a restart is answered after it.
func inputFingerprint(taskID, method string, params json.RawMessage) string {
	var p map[string]json.RawMessage
	_ = json.Unmarshal(params, &p)
	delete(p, "_meta")
	canon, _ := json.Marshal(p) // map keys sorted: the same question encodes the same way
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(canon)
	return "elicit-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// listen keeps the legacy GET event stream open on the current session and
// dispatches what arrives there: status notifications and server requests
// (answered with a POST). mcp-go's own listener only starts after an
// initialize it sent itself, so a resumed session would get none; this one
// serves both. It stops on 405 (no stream offered), on a gone session, and
// on Close.
func (c *legacyConn) listen() {
	defer c.wg.Done()
	defer c.settleGet()
	failures := 0
	for c.life.Err() == nil {
		opened, stop := c.listenOnce()
		if stop {
			return
		}
		if opened {
			failures = 0
		} else {
			failures++
		}
		if failures > 5 {
			c.opts.Logger.Info("mcpclient: GET event stream unavailable, relying on polling", "server", c.opts.URL)
			return
		}
		if sleepCtx(c.life, time.Duration(200*(failures+1))*time.Millisecond) != nil {
			return
		}
	}
}

func (c *legacyConn) listenOnce() (opened, stop bool) {
	req, err := http.NewRequestWithContext(c.life, http.MethodGet, c.opts.URL, nil)
	if err != nil {
		return false, true
	}
	c.sessionHeaders(req.Header)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.opts.HTTPClient.Do(req)
	c.settleGet() // the server took or refused the stream (or is unreachable)
	if err != nil {
		return false, c.life.Err() != nil
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed, resp.StatusCode == http.StatusNotFound:
		return false, true
	case resp.StatusCode != http.StatusOK:
		return false, false
	}
	c.getNotified.Store(false)
	c.getOpen.Store(true)
	defer c.getOpen.Store(false)
	_ = readSSE(resp.Body, c.opts.Limits.MaxMessage, func(data []byte) bool {
		m, err := decodeMessage(data, c.opts.Limits)
		if err != nil {
			return false
		}
		switch {
		case m.isNotification() && m.Method == "notifications/tasks/status":
			c.getNotified.Store(true)
			c.deliverStatus(m.Params)
		case m.isRequest():
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.serveAndRespond(c.life, m)
			}()
		}
		return c.life.Err() != nil
	})
	return true, false
}

// sessionHeaders sets the session, protocol and auth headers.
func (c *legacyConn) sessionHeaders(h http.Header) {
	if sid := c.tr.GetSessionId(); sid != "" {
		h.Set(headerSessionID, sid)
	}
	if c.info.ProtocolVersion != "" {
		h.Set(headerProtoVersion, c.info.ProtocolVersion)
	}
	if c.opts.Token != "" {
		h.Set("Authorization", "Bearer "+c.opts.Token)
	}
}

// respond POSTs the answer to a server request and reports whether the server took it.
func (c *legacyConn) respond(id json.RawMessage, result json.RawMessage, rpcErr *RPCError) error {
	if c.closed.Load() {
		return ErrClosed
	}
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		msg["error"] = rpcErr
	} else {
		msg["result"] = result
	}
	body, _ := json.Marshal(msg)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.life), 30*time.Second)
	defer cancel()
	s, ok := c.tr.(*legacyHTTP)
	if !ok {
		return fmt.Errorf("%w: no HTTP session", ErrNotDelivered)
	}
	status, err := s.postRaw(ctx, body)
	switch {
	case err != nil:
		c.opts.Logger.Warn("mcpclient: could not deliver answer to server request", "err", err)
		return err
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: HTTP 404", ErrSessionGone)
	case status >= 300:
		return &HTTPError{Status: status, Err: ErrMalformed}
	}
	return nil
}
