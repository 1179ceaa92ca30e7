package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The 2026-07-28 extension is built directly on net/http (and, for stdio,
// on mcp-go's line framing only). mcp-go v1.2.1 knows the modern core
// (server/discover, MRTR types in mcp/discover.go and mcp/mrtr.go) but not the
// tasks extension, and its Streamable HTTP transport decides "modern" from
// its own negotiated version, hides the HTTP status (era detection needs to
// tell a 400 with a modern error body from anything else) and injects its
// own _meta. Stateless POSTs with the Mcp-Method / Mcp-Name /
// MCP-Protocol-Version headers are short enough to own here.

const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	headerMcpMethod        = "Mcp-Method"
	headerMcpName          = "Mcp-Name"
)

// extWire carries one extension request and returns its raw result or a
// mapped error.
type extWire interface {
	roundTrip(ctx context.Context, method, name string, params map[string]any) (json.RawMessage, error)
	close() error
}

// extHTTPWire is the Streamable HTTP wire: one stateless POST per request.
type extHTTPWire struct {
	h        *httpRPC
	ids      atomic.Int64
	onNotify func(*wireMessage)
}

func (w *extHTTPWire) roundTrip(ctx context.Context, method, name string, params map[string]any) (json.RawMessage, error) {
	id := fmt.Sprintf("tg-%d", w.ids.Add(1))
	body, err := encodeRequest(id, method, params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, err)
	}
	hdr := http.Header{}
	hdr.Set(headerMcpMethod, method)
	if name != "" {
		hdr.Set(headerMcpName, name)
	}
	hdr.Set(headerProtoVersion, string(EraExtension))
	for k, v := range ctxParamHeaders(ctx) {
		hdr[k] = v
	}
	rep, err := w.h.post(ctx, id, body, hdr, w.onNotify)
	if err != nil {
		if rep.status == http.StatusNotFound && (method == "tasks/result" || method == "tasks/list") {
			return nil, fmt.Errorf("%s: %w: %w", method, ErrRemovedMethod, err)
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return extAnswer(method, rep.msg, w.h.lim)
}

func (w *extHTTPWire) close() error { return nil }

// extAnswer turns a response message into a result or a mapped error.
func extAnswer(method string, m *wireMessage, lim Limits) (json.RawMessage, error) {
	if m == nil {
		return nil, fmt.Errorf("%s: %w: no JSON-RPC response", method, ErrMalformed)
	}
	if m.Error != nil {
		e := sanitizeRPCError(m.Error, lim)
		if e.Code == CodeMethodNotFound && (method == "tasks/result" || method == "tasks/list") {
			return nil, fmt.Errorf("%s: %w: %w", method, ErrRemovedMethod, e)
		}
		return nil, fmt.Errorf("%s: %w", method, mapRPCError(method, e))
	}
	return m.Result, nil
}

// extStdioWire is the stdio wire over mcp-go's line-delimited transport.
type extStdioWire struct {
	tr  transport.Interface
	ids atomic.Int64
	lim Limits
}

func (w *extStdioWire) roundTrip(ctx context.Context, method, _ string, params map[string]any) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, err)
	}
	id := fmt.Sprintf("tg-%d", w.ids.Add(1))
	resp, err := w.tr.SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(id), Method: method, Params: params})
	if err != nil {
		if p, ok := w.tr.(*stdioProc); ok {
			err = p.overLimit(err)
		}
		if errors.Is(err, transport.ErrTransportClosed) {
			return nil, fmt.Errorf("%s: %w: %w", method, ErrTransportLost, err)
		}
		return nil, fmt.Errorf("%s: %w", method, classifySendError(true, err))
	}
	m := &wireMessage{JSONRPC: "2.0", Result: resp.Result}
	if resp.Error != nil {
		m.Error = &RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
		if resp.Error.Data != nil {
			m.Error.Data, _ = json.Marshal(resp.Error.Data)
		}
	}
	if len(m.Result) > w.lim.withDefaults().MaxMessage {
		return nil, fmt.Errorf("%s: %w", method, ErrResultTooLarge)
	}
	return extAnswer(method, m, w.lim)
}

func (w *extStdioWire) close() error { return w.tr.Close() }

// extConn speaks the 2026-07-28 tasks extension.
type extConn struct {
	opts    Options
	wire    extWire
	info    ServerInfo
	tracker statusTracker
	inputs  inputBroker
	closed  atomic.Bool
	cancel  context.CancelFunc

	toolsMu sync.RWMutex
	tools   []Tool
	dropped []DroppedTool
}

func (c *extConn) tool(name string) (Tool, bool) {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return findTool(c.tools, name)
}

// DroppedTools lists the tools left out of Tools, and why.
func (c *extConn) DroppedTools() []DroppedTool {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return append([]DroppedTool(nil), c.dropped...)
}

// meta builds the per-request _meta. declare adds the tasks extension to the
// client capabilities: only on the task route.
func (c *extConn) meta(declare bool, extra map[string]any) map[string]any {
	caps := map[string]any{}
	if c.opts.OnInput != nil {
		caps["elicitation"] = map[string]any{"form": map[string]any{}, "url": map[string]any{}}
	}
	if declare {
		caps["extensions"] = map[string]any{ExtensionName: map[string]any{}}
	}
	return mergeMeta(extra, map[string]any{metaProtocolVersion: string(EraExtension), metaClientCapabilities: caps,
		metaClientInfo: map[string]any{"name": c.opts.ClientName, "version": c.opts.ClientVersion}})
}

func (c *extConn) send(ctx context.Context, method, name string, params map[string]any) (json.RawMessage, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%s: %w: %w", method, ErrNotDelivered, ErrClosed)
	}
	return c.wire.roundTrip(ctx, method, name, params)
}

func (c *extConn) Info() ServerInfo { return c.info }

func (c *extConn) Tools() []Tool {
	c.toolsMu.RLock()
	defer c.toolsMu.RUnlock()
	return append([]Tool(nil), c.tools...)
}

func (c *extConn) RefreshTools(ctx context.Context) ([]Tool, error) {
	tools, err := listAllTools(ctx, EraExtension, func(ctx context.Context, params map[string]any) (json.RawMessage, error) {
		params["_meta"] = c.meta(false, nil)
		return c.send(ctx, "tools/list", "", params)
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

// callRounds runs tools/call, answering multi-round-trip input requests
// through opts.Answer and retrying (a new request id each time) with the
// answers and the echoed requestState.
func (c *extConn) callRounds(ctx context.Context, name string, args any, opts CallOptions, declare bool) (*extCallResult, error) {
	rounds := opts.MaxRounds
	if rounds <= 0 {
		rounds = 8
	}
	params := map[string]any{"name": name, "arguments": argsOrEmpty(args), "_meta": c.meta(declare, callMeta(opts))}
	if t, ok := c.tool(name); ok {
		ctx = withParamHeaders(ctx, paramHeaders(t, args))
	}
	for round := 0; ; round++ {
		raw, err := c.send(ctx, "tools/call", name, params)
		if err != nil {
			return nil, err
		}
		res, err := decodeExtCall(raw, c.opts.Limits)
		if err != nil {
			return nil, err
		}
		if res.Kind != extInputRequired {
			return res, nil
		}
		if opts.Answer == nil {
			return nil, &InputRequiredError{Requests: res.InputRequests}
		}
		if round+1 >= rounds {
			return nil, fmt.Errorf("%w: more than %d input rounds", ErrMalformed, rounds)
		}
		answers := map[string]any{}
		for _, r := range res.InputRequests {
			ans, err := opts.Answer(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("answer input %q: %w", r.Key, err)
			}
			answers[r.Key] = inputResponseWire(ans)
		}
		params = map[string]any{"name": name, "arguments": argsOrEmpty(args), "_meta": c.meta(declare, callMeta(opts)),
			"inputResponses": answers}
		if res.RequestState != "" {
			params["requestState"] = res.RequestState
		}
	}
}

func inputResponseWire(r InputResponse) map[string]any {
	out := map[string]any{"action": string(r.Action)}
	if r.Action == ActionAccept && r.Content != nil {
		out["content"] = r.Content
	}
	return out
}

func (c *extConn) CallTool(ctx context.Context, name string, args any, opts CallOptions) (*ToolResult, error) {
	res, err := c.callRounds(ctx, name, args, opts, false)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	if res.Kind == extTask {
		return nil, fmt.Errorf("call %s: %w: a task for an undeclared extension", name, ErrExtensionUnsupported)
	}
	return res.Result, nil
}

func (c *extConn) CreateTask(ctx context.Context, name string, args any, opts TaskOptions) (Task, error) {
	if !c.info.Capabilities.Extension {
		return Task{}, fmt.Errorf("create task with %s: %w", name, ErrTasksNotAdvertised)
	}
	res, err := c.callRounds(ctx, name, args, opts.CallOptions, true)
	if err != nil {
		return Task{}, createFailure(name, err)
	}
	if res.Kind != extTask {
		return Task{}, fmt.Errorf("create task with %s: %w", name, &NoTaskError{Result: res.Result})
	}
	_ = c.tracker.observe(res.Task.ID, res.Task.Status)
	return res.Task, nil
}

func (c *extConn) GetTask(ctx context.Context, taskID string) (Snapshot, error) {
	sent := c.tracker.sent()
	raw, err := readAgain(ctx, func() (json.RawMessage, error) {
		return c.send(ctx, "tasks/get", taskID, map[string]any{"taskId": taskID, "_meta": c.meta(true, nil)})
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("task %s: %w", taskID, err)
	}
	s, err := decodeExtSnapshot(raw, c.opts.Limits)
	if err != nil {
		return Snapshot{}, fmt.Errorf("task %s: %w", taskID, err)
	}
	if s.Task.ID != taskID {
		return Snapshot{}, &TaskIDChangedError{Asked: taskID, Answered: s.Task.ID, Status: s.Task.Status}
	}
	v, stale := c.tracker.answer(taskID, s.Task.Status, sent)
	if stale { // answered before the terminal status now known: read again
		return c.GetTask(ctx, taskID)
	}
	s.Violation = v
	s.InputRequests = c.inputs.offer(taskID, s.InputRequests)
	return s, nil
}

// AwaitOutcome polls tasks/get at the server's pollIntervalMs until the
// task is terminal; the result or error is inlined there.
func (c *extConn) AwaitOutcome(ctx context.Context, taskID string) (Outcome, error) {
	for attempt := 0; ; attempt++ {
		s, err := c.GetTask(ctx, taskID)
		if err != nil {
			return Outcome{}, err
		}
		if s.Outcome != nil {
			return *s.Outcome, nil
		}
		if err := sleepCtx(ctx, pollDelay(s.Task, attempt)); err != nil {
			return Outcome{}, fmt.Errorf("task %s: await outcome: %w", taskID, err)
		}
	}
}

func (c *extConn) PendingInput(taskID string) []InputRequest { return c.inputs.list(taskID) }

// AnswerInput sends tasks/update for one key; each key is answered once.
func (c *extConn) AnswerInput(ctx context.Context, taskID, key string, resp InputResponse) error {
	p, err := c.inputs.claim(taskID, key)
	if err != nil {
		return err
	}
	params := map[string]any{"taskId": taskID, "inputResponses": map[string]any{key: inputResponseWire(resp)}, "_meta": c.meta(true, nil)}
	if _, err := c.send(ctx, "tasks/update", taskID, params); err != nil {
		if errIsTransport(err) {
			// The server ignores already-answered keys, so trying again is safe.
			c.inputs.unclaim(p)
		}
		return fmt.Errorf("task %s input %q: %w", taskID, key, err)
	}
	return nil
}

func (c *extConn) ListTasks(context.Context, string) (TaskPage, error) {
	return TaskPage{}, fmt.Errorf("tasks/list: %w: %w", ErrNotSupported, ErrRemovedMethod)
}

func (c *extConn) CancelTask(ctx context.Context, taskID string) (CancelResult, error) {
	if _, err := c.send(ctx, "tasks/cancel", taskID, map[string]any{"taskId": taskID, "_meta": c.meta(true, nil)}); err != nil {
		return CancelResult{}, fmt.Errorf("cancel task %s: %w", taskID, err)
	}
	return CancelResult{Acknowledged: true}, nil
}

func (c *extConn) Seed(taskID string, status Status) { c.tracker.seed(taskID, status) }

func (c *extConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.cancel != nil {
		c.cancel()
	}
	return c.wire.close()
}

// onNotify handles notifications that arrive on extension response streams
// (subscriptions/listen): the acknowledgement goes to Options.OnSubscribed,
// each notifications/tasks DetailedTask is read as tasks/get would read it
// (its input requests offered like a poll's) and goes to Options.OnStatus.
// Both are hints: polling stays authoritative.
func (c *extConn) onNotify(m *wireMessage) {
	switch m.Method {
	case "notifications/subscriptions/acknowledged":
		if c.opts.OnSubscribed == nil {
			return
		}
		var ack struct {
			Notifications struct {
				TaskIDs []string `json:"taskIds"`
			} `json:"notifications"`
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(m.Params, &ack) != nil {
			return
		}
		var subID string
		_ = json.Unmarshal(ack.Meta[metaSubscriptionID], &subID)
		ids := ack.Notifications.TaskIDs
		if len(ids) > maxSubscribeIDs {
			ids = ids[:maxSubscribeIDs]
		}
		for i, id := range ids {
			ids[i] = truncate(id, 256)
		}
		c.opts.OnSubscribed(Subscription{ID: truncate(subID, 256), TaskIDs: ids})
	case "notifications/tasks":
		s, err := decodeExtSnapshot(m.Params, c.opts.Limits)
		if err != nil {
			return
		}
		v, stale := c.tracker.notified(s.Task.ID, s.Task.Status)
		if stale {
			return
		}
		s.Violation = v
		s.InputRequests = c.inputs.offer(s.Task.ID, s.InputRequests)
		if c.opts.OnStatus != nil {
			c.opts.OnStatus(s)
		}
	}
}

// metaSubscriptionID tags the messages of one subscriptions/listen stream.
const metaSubscriptionID = "io.modelcontextprotocol/subscriptionId"

// maxSubscribeIDs bounds the task ids read from one acknowledgement.
const maxSubscribeIDs = 1024

// Subscription is a server's notifications/subscriptions/acknowledged: the
// stream's id and the task ids it accepted (unknown or foreign ids are left
// out by the server).
type Subscription struct {
	// ID is _meta["io.modelcontextprotocol/subscriptionId"], "" if absent.
	ID string
	// TaskIDs are the accepted task ids.
	TaskIDs []string
}

// Subscribe opens subscriptions/listen for the given tasks on an
// extension-era connection and blocks while the stream lasts: the
// acknowledgement goes to Options.OnSubscribed and each notifications/tasks
// to Options.OnStatus. It returns nil when ctx ends, ErrNotSupported on a
// legacy connection or when the server refuses the method (-32601, -32600),
// and the transport error when the stream drops. Notifications are hints:
// it never replaces polling (Conn.GetTask, Conn.AwaitOutcome), which stays
// authoritative whether or not the subscription holds.
func Subscribe(ctx context.Context, conn Conn, taskIDs []string) error {
	c, ok := conn.(*extConn)
	if !ok {
		return fmt.Errorf("subscriptions/listen: %w", ErrNotSupported)
	}
	_, err := c.send(ctx, "subscriptions/listen", "", map[string]any{
		"notifications": map[string]any{"taskIds": taskIDs}, "_meta": c.meta(true, nil),
	})
	if err == nil || ctx.Err() != nil {
		return nil
	}
	var rpc *RPCError
	if errors.As(err, &rpc) && (rpc.Code == CodeMethodNotFound || rpc.Code == CodeInvalidRequest) {
		return fmt.Errorf("subscriptions/listen: %w: %w", ErrNotSupported, err)
	}
	return fmt.Errorf("subscriptions/listen: %w", err)
}
