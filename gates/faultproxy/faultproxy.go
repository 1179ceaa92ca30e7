// Package faultproxy is a JSON-RPC-aware proxy for MCP Streamable HTTP that sits between
// Taskgate and a server and breaks the conversation on purpose, in either Tasks era.
//
// It understands both wire shapes (2025-11-25 sessions with params.task and tasks/result; the
// 2026-07-28 extension with resultType "task" and inlined results) well enough to find the
// moments that matter: the CreateTaskResult of a tools/call, a snapshot that says completed, a
// snapshot that says input_required, a tasks/cancel. A Rule cuts the transport at one of those
// points, delivers a request twice, delays it, or rewrites a response (a forbidden status, a
// changed task id, a dropped field). Every message that passes is logged with its era, method,
// task id and status, so a gate case can keep what it saw as evidence.
//
// The proxy listens on 127.0.0.1 only. It is used by the fault suite of gates and by tests.
package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Action is what a Rule does.
type Action string

const (
	// CutBeforeCreateResult forwards a task-creating tools/call and cuts the transport
	// instead of delivering its CreateTaskResult: the task exists, the client never hears of it.
	CutBeforeCreateResult Action = "cut_before_create_result"
	// CutAfterCreateResult delivers the CreateTaskResult, then cuts the next request the
	// client sends (not forwarded).
	CutAfterCreateResult Action = "cut_after_create_result"
	// CutBeforeResult cuts between completed and result retrieval: 2025-11-25, the first
	// tasks/result after a completed snapshot is cut before it reaches the server;
	// 2026-07-28, the completed tasks/get answer that carries the result is cut.
	CutBeforeResult Action = "cut_before_result"
	// CutDuringInput cuts the first answer or stream event that shows input_required (a
	// tasks/get snapshot, or a 2025-11-25 elicitation/create on a stream).
	CutDuringInput Action = "cut_during_input"
	// CutAfterCancel forwards tasks/cancel and cuts the transport instead of its answer.
	CutAfterCancel Action = "cut_after_cancel"
	// Duplicate delivers a matching request twice to the server; the client gets the
	// first answer.
	Duplicate Action = "duplicate"
	// Delay holds a matching request for Rule.Delay before forwarding it.
	Delay Action = "delay"
	// Rewrite passes each matching response message, and each server request or notification
	// on a stream (matched by its own method), through Rule.Rewrite.
	Rewrite Action = "rewrite"
	// Throttle answers a matching request HTTP 429 with Retry-After (Rule.Delay, whole
	// seconds, at least 1) without forwarding it, as an overloaded server would.
	Throttle Action = "throttle"
	// Swallow answers a matching request with an empty JSON-RPC result without forwarding
	// it: the client is told it was accepted, the server never sees it.
	Swallow Action = "swallow"
)

// Rule is one fault. A rule fires Times times (0 = once; negative = always) and then stays
// in the list, spent.
type Rule struct {
	// Action is the fault.
	Action Action
	// Method narrows Duplicate, Delay and Rewrite to requests of this method ("" = any).
	Method string
	// Delay is the hold of a Delay rule.
	Delay time.Duration
	// Rewrite changes a message in place (a response's "result" or "error", a server
	// request's "params"); it returns false to leave the message alone (the rule does not
	// fire).
	Rewrite func(msg map[string]any) bool
	// Times is how often the rule fires (0 = once, negative = every time).
	Times int

	fired int
	armed bool
}

func (r *Rule) live() bool {
	if r.Times < 0 {
		return true
	}
	n := r.Times
	if n == 0 {
		n = 1
	}
	return r.fired < n
}

// Message is one JSON-RPC message the proxy saw, bounded: no payload is kept.
type Message struct {
	// At is when the proxy saw it.
	At time.Time `json:"at"`
	// Dir is "request" (client → server), "duplicate" (the proxy's second delivery of a
	// request), "response" (server → client, on the answer of a POST) or "stream" (a server
	// request or notification, or anything on a GET stream).
	Dir string `json:"dir"`
	// Era is "2025-11-25" or "2026-07-28" when the proxy could tell.
	Era string `json:"era,omitempty"`
	// Method is the request's method (for a response: the method it answers).
	Method string `json:"method,omitempty"`
	// ID is the JSON-RPC id as text.
	ID string `json:"id,omitempty"`
	// TaskID and Status are the task the message names and the status it reports.
	TaskID string `json:"task_id,omitempty"`
	Status string `json:"status,omitempty"`
	// RelatedTask is the task id of a result's related-task _meta, when it carries one.
	RelatedTask string `json:"related_task,omitempty"`
	// ErrorCode is the JSON-RPC error code of an error answer.
	ErrorCode int `json:"error_code,omitempty"`
	// HTTPStatus is the HTTP status of an answer.
	HTTPStatus int `json:"http_status,omitempty"`
	// Fault names the rule that acted on the message ("" = passed untouched).
	Fault Action `json:"fault,omitempty"`
}

// maxLog bounds the message log.
const maxLog = 4096

// maxBody bounds a request or JSON answer the proxy reads.
const maxBody = 8 << 20

// Proxy forwards MCP Streamable HTTP to one target and applies its rules.
type Proxy struct {
	target *url.URL
	client *http.Client

	mu          sync.Mutex
	rules       []*Rule
	log         []Message
	cutNext     bool // a CutAfterCreateResult fired: cut the next request
	cutResultOf map[string]bool

	srv *http.Server
	ln  net.Listener
}

// New returns a proxy to the MCP endpoint target (http or https URL).
func New(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an http(s) URL", target)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	return &Proxy{target: u, client: &http.Client{Transport: tr}, cutResultOf: map[string]bool{}}, nil
}

// Start listens on 127.0.0.1 (a free port) and returns the URL to use instead of the target:
// same path, the proxy's host.
func (p *Proxy) Start() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	u := *p.target
	u.Scheme, u.Host = "http", ln.Addr().String()
	return u.String(), nil
}

// Close stops the listener and ends open connections.
func (p *Proxy) Close() error {
	if p.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	return p.srv.Close()
}

// Add installs a rule; it applies to messages that arrive afterwards. The returned pointer
// lets the caller ask Fired later.
func (p *Proxy) Add(r Rule) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	rr := r
	p.rules = append(p.rules, &rr)
	return &rr
}

// Fired reports how many times r has fired.
func (p *Proxy) Fired(r *Rule) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return r.fired
}

// Clear removes every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules, p.cutNext, p.cutResultOf = nil, false, map[string]bool{}
}

// Messages returns a copy of the message log.
func (p *Proxy) Messages() []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Message(nil), p.log...)
}

// Count returns how many logged messages have the direction and method.
func (p *Proxy) Count(dir, method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.log {
		if m.Dir == dir && m.Method == method {
			n++
		}
	}
	return n
}

func (p *Proxy) record(m Message) {
	m.At = time.Now().UTC()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.log) < maxLog {
		p.log = append(p.log, m)
	}
}

// take returns the first live rule with the action (and method, when the rule names one)
// and marks it fired; nil when none.
func (p *Proxy) take(a Action, method string) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Action == a && r.live() && (r.Method == "" || r.Method == method) {
			r.fired++
			return r
		}
	}
	return nil
}

// has reports whether a live rule with the action exists.
func (p *Proxy) has(a Action) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Action == a && r.live() {
			return true
		}
	}
	return false
}

// wire is the part of a JSON-RPC message the proxy reads.
type wire struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code int `json:"code"`
	} `json:"error,omitempty"`
}

// taskView is a task as either era describes it in a result.
type taskView struct {
	TaskID     string `json:"taskId"`
	Status     string `json:"status"`
	ResultType string `json:"resultType"`
	Task       *struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
	} `json:"task"`
}

// taskOf returns the task id and status a result names, and whether it is a created task.
func taskOf(method string, result json.RawMessage) (id, status string, created bool) {
	var v taskView
	if len(result) == 0 || json.Unmarshal(result, &v) != nil {
		return "", "", false
	}
	if v.Task != nil && v.Task.TaskID != "" { // 2025-11-25 CreateTaskResult
		return v.Task.TaskID, v.Task.Status, method == "tools/call"
	}
	if method == "tools/call" {
		if v.ResultType == "task" {
			return v.TaskID, v.Status, true
		}
		return "", "", false
	}
	return v.TaskID, v.Status, false
}

func paramTaskID(params json.RawMessage) string {
	var v struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(params, &v)
	return v.TaskID
}

// eraOf tells the era of a client request.
func eraOf(h http.Header, m *wire) string {
	if h.Get("Mcp-Session-Id") != "" || m.Method == "initialize" {
		return "2025-11-25"
	}
	if v := h.Get("MCP-Protocol-Version"); v != "" {
		if v == "2026-07-28" {
			return v
		}
		return "2025-11-25"
	}
	if m.Method == "server/discover" || bytes.Contains(m.Params, []byte(`"io.modelcontextprotocol/protocolVersion"`)) {
		return "2026-07-28"
	}
	return ""
}

// abort cuts the client's connection without a (complete) answer.
func abort() { panic(http.ErrAbortHandler) }

var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Accept-Encoding": true}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if hopHeaders[http.CanonicalHeaderKey(k)] {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// ServeHTTP forwards one HTTP exchange, applying the rules.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	var m wire
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(b) > maxBody {
			http.Error(w, "faultproxy: request body unreadable or too large", http.StatusRequestEntityTooLarge)
			return
		}
		body = b
		_ = json.Unmarshal(body, &m) // a batch or garbage passes through unread
	}
	era := eraOf(r.Header, &m)
	reqTask := paramTaskID(m.Params)
	if m.Method != "" {
		msg := Message{Dir: "request", Era: era, Method: m.Method, ID: string(m.ID), TaskID: reqTask}
		p.mu.Lock()
		cut := p.cutNext
		p.cutNext = false
		if !cut && m.Method == "tasks/result" && p.cutResultOf[reqTask] {
			delete(p.cutResultOf, reqTask)
			cut = true
			msg.Fault = CutBeforeResult
		} else if cut {
			msg.Fault = CutAfterCreateResult
		}
		p.mu.Unlock()
		if cut {
			p.record(msg)
			abort()
		}
		if th := p.take(Throttle, m.Method); th != nil {
			msg.Fault = Throttle
			msg.HTTPStatus = http.StatusTooManyRequests
			p.record(msg)
			secs := max(1, int((th.Delay+time.Second-1)/time.Second))
			w.Header().Set("Retry-After", fmt.Sprint(secs))
			http.Error(w, "faultproxy: too many requests", http.StatusTooManyRequests)
			return
		}
		if len(m.ID) > 0 && p.take(Swallow, m.Method) != nil {
			msg.Fault = Swallow
			p.record(msg)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`))
			return
		}
		if d := p.take(Delay, m.Method); d != nil {
			msg.Fault = Delay
			select {
			case <-time.After(d.Delay):
			case <-r.Context().Done():
				p.record(msg)
				return
			}
		}
		p.record(msg)
		if p.take(Duplicate, m.Method) != nil {
			p.record(Message{Dir: "duplicate", Era: era, Method: m.Method, ID: string(m.ID), TaskID: reqTask, Fault: Duplicate})
			if resp, err := p.forward(r, body); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
				_ = resp.Body.Close()
			}
		}
	}
	resp, err := p.forward(r, body)
	if err != nil {
		http.Error(w, "faultproxy: upstream unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	dir := "response"
	if r.Method == http.MethodGet {
		dir = "stream"
	}
	switch ct {
	case "application/json":
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if err != nil {
			abort()
		}
		out := p.onMessage(raw, dir, era, m.Method, resp.StatusCode)
		copyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
		p.afterDelivery()
	case "text/event-stream":
		copyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		fl, _ := w.(http.Flusher)
		if fl != nil {
			fl.Flush()
		}
		p.pumpEvents(resp.Body, w, fl, dir, era, m.Method, resp.StatusCode)
		p.afterDelivery()
	default:
		if m.Method != "" {
			p.record(Message{Dir: dir, Era: era, Method: m.Method, ID: string(m.ID), HTTPStatus: resp.StatusCode})
		}
		copyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, maxBody))
	}
}

// afterDelivery turns an armed CutAfterCreateResult into a cut of the next request.
func (p *Proxy) afterDelivery() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Action == CutAfterCreateResult && r.armed {
			r.armed = false
			p.cutNext = true
		}
	}
}

func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	u := *p.target
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeaders(out.Header, r.Header)
	if body == nil {
		out.Body = http.NoBody
	}
	return p.client.Do(out) //nolint:gosec // a proxy to the configured target: forwarding is its purpose
}

// pumpEvents copies an SSE stream event by event, applying the rules to each message.
func (p *Proxy) pumpEvents(src io.Reader, w io.Writer, fl http.Flusher, dir, era, method string, code int) {
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	var ev []string
	var data bytes.Buffer
	flush := func() {
		if len(ev) == 0 {
			return
		}
		if data.Len() > 0 {
			out := p.onMessage(data.Bytes(), dir, era, method, code)
			for _, l := range ev {
				if !strings.HasPrefix(l, "data:") {
					_, _ = io.WriteString(w, l+"\n")
				}
			}
			for _, l := range bytes.Split(out, []byte("\n")) {
				_, _ = io.WriteString(w, "data: "+string(l)+"\n")
			}
		} else {
			for _, l := range ev {
				_, _ = io.WriteString(w, l+"\n")
			}
		}
		_, _ = io.WriteString(w, "\n")
		if fl != nil {
			fl.Flush()
		}
		ev, data = ev[:0], bytes.Buffer{}
	}
	for sc.Scan() {
		l := sc.Text()
		if l == "" {
			flush()
			continue
		}
		ev = append(ev, l)
		if v, ok := strings.CutPrefix(l, "data:"); ok {
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(v, " "))
		}
	}
	flush()
}

// onMessage logs one server → client message, applies the response rules and returns the
// bytes to deliver. It cuts the connection when a cut rule fires.
func (p *Proxy) onMessage(raw []byte, dir, era, method string, code int) []byte {
	var m wire
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	msg := Message{Dir: dir, Era: era, Method: method, ID: string(m.ID), HTTPStatus: code}
	if m.Method != "" { // a server request or notification on the stream
		msg.Method = m.Method
		msg.Dir = "stream"
		var meta struct {
			Meta map[string]struct {
				TaskID string `json:"taskId"`
			} `json:"_meta"`
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		}
		_ = json.Unmarshal(m.Params, &meta)
		msg.TaskID, msg.Status = meta.TaskID, meta.Status
		if rt, ok := meta.Meta["io.modelcontextprotocol/related-task"]; ok {
			msg.TaskID = rt.TaskID
		}
		if strings.HasPrefix(m.Method, "notifications/tasks") && meta.Status == "completed" && p.has(CutBeforeResult) {
			if era == "2026-07-28" {
				p.take(CutBeforeResult, "")
				msg.Fault = CutBeforeResult
				p.record(msg)
				abort()
			}
			p.take(CutBeforeResult, "")
			p.mu.Lock()
			p.cutResultOf[msg.TaskID] = true
			p.mu.Unlock()
		}
		if m.Method == "elicitation/create" && p.take(CutDuringInput, "") != nil {
			msg.Fault = CutDuringInput
			p.record(msg)
			abort()
		}
		if p.has(Rewrite) {
			if out, ok := p.rewrite(raw, m.Method); ok {
				msg.Fault = Rewrite
				p.record(msg)
				return out
			}
		}
		p.record(msg)
		return raw
	}
	if m.Error != nil {
		msg.ErrorCode = m.Error.Code
	}
	id, status, created := taskOf(method, m.Result)
	msg.TaskID, msg.Status = id, status
	var rel struct {
		Meta map[string]struct {
			TaskID string `json:"taskId"`
		} `json:"_meta"`
	}
	if len(m.Result) > 0 && json.Unmarshal(m.Result, &rel) == nil {
		if rt, ok := rel.Meta["io.modelcontextprotocol/related-task"]; ok {
			msg.RelatedTask = rt.TaskID
		}
	}
	switch {
	case created && p.take(CutBeforeCreateResult, "") != nil:
		msg.Fault = CutBeforeCreateResult
		p.record(msg)
		abort()
	case created && p.has(CutAfterCreateResult):
		if r := p.take(CutAfterCreateResult, ""); r != nil {
			p.mu.Lock()
			r.armed = true
			p.mu.Unlock()
			msg.Fault = CutAfterCreateResult
		}
	case method == "tasks/cancel" && p.take(CutAfterCancel, "") != nil:
		msg.Fault = CutAfterCancel
		p.record(msg)
		abort()
	case method == "tasks/get" && status == "input_required" && p.take(CutDuringInput, "") != nil:
		msg.Fault = CutDuringInput
		p.record(msg)
		abort()
	case method == "tasks/get" && status == "completed" && p.has(CutBeforeResult):
		if era == "2026-07-28" || bytes.Contains(m.Result, []byte(`"result"`)) {
			p.take(CutBeforeResult, "")
			msg.Fault = CutBeforeResult
			p.record(msg)
			abort()
		}
		p.take(CutBeforeResult, "")
		p.mu.Lock()
		p.cutResultOf[id] = true
		p.mu.Unlock()
	}
	if p.has(Rewrite) {
		if out, ok := p.rewrite(raw, method); ok {
			msg.Fault = Rewrite
			var nm wire
			if json.Unmarshal(out, &nm) == nil {
				msg.TaskID, msg.Status, _ = taskOf(method, nm.Result)
			}
			p.record(msg)
			return out
		}
	}
	p.record(msg)
	return raw
}

func (p *Proxy) rewrite(raw []byte, method string) ([]byte, bool) {
	p.mu.Lock()
	var rules []*Rule
	for _, r := range p.rules {
		if r.Action == Rewrite && r.live() && (r.Method == "" || r.Method == method) && r.Rewrite != nil {
			rules = append(rules, r)
		}
	}
	p.mu.Unlock()
	for _, r := range rules {
		var msg map[string]any
		if json.Unmarshal(raw, &msg) != nil {
			return raw, false
		}
		if !r.Rewrite(msg) {
			continue
		}
		out, err := json.Marshal(msg)
		if err != nil {
			return raw, false
		}
		p.mu.Lock()
		r.fired++
		p.mu.Unlock()
		return out, true
	}
	return raw, false
}

// ResultObject returns the message's result object (either era's task fields sit in it, or
// under "task" in a 2025-11-25 CreateTaskResult), or nil.
func ResultObject(msg map[string]any) map[string]any {
	res, _ := msg["result"].(map[string]any)
	if res == nil {
		return nil
	}
	if t, ok := res["task"].(map[string]any); ok {
		return t
	}
	return res
}

// SetStatus returns a Rewrite that replaces the status of a task answer whose status is from
// with to (from "" = any status).
func SetStatus(from, to string) func(map[string]any) bool {
	return func(msg map[string]any) bool {
		t := ResultObject(msg)
		if t == nil {
			return false
		}
		s, ok := t["status"].(string)
		if !ok || (from != "" && s != from) {
			return false
		}
		t["status"] = to
		return true
	}
}

// SetTaskID returns a Rewrite that replaces the task id of a task answer.
func SetTaskID(id string) func(map[string]any) bool {
	return func(msg map[string]any) bool {
		t := ResultObject(msg)
		if t == nil {
			return false
		}
		if _, ok := t["taskId"].(string); !ok {
			return false
		}
		t["taskId"] = id
		return true
	}
}

// DropField returns a Rewrite that removes a field of the task answer (e.g. "status",
// "pollInterval", "ttlMs").
func DropField(name string) func(map[string]any) bool {
	return func(msg map[string]any) bool {
		t := ResultObject(msg)
		if t == nil {
			return false
		}
		if _, ok := t[name]; !ok {
			return false
		}
		delete(t, name)
		return true
	}
}

// SetRelatedTask returns a Rewrite that makes a message's related-task _meta (a 2025-11-25
// result's, or a server request's params') name task id instead.
func SetRelatedTask(id string) func(map[string]any) bool {
	return func(msg map[string]any) bool {
		obj, _ := msg["result"].(map[string]any)
		if obj == nil {
			obj, _ = msg["params"].(map[string]any)
		}
		if obj == nil {
			return false
		}
		meta, _ := obj["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			obj["_meta"] = meta
		}
		meta["io.modelcontextprotocol/related-task"] = map[string]any{"taskId": id}
		return true
	}
}
