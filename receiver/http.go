package receiver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const maxBody = 4 << 20

// legacyVersions are the MCP-Protocol-Version values of the stateful era.
var legacyVersions = map[string]bool{"2024-11-05": true, "2025-03-26": true, "2025-06-18": true, VersionLegacy: true}

func (r *Receiver) serveMCP(w http.ResponseWriter, req *http.Request) {
	ident, authed := r.authenticate(req)
	if !authed {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate-receiver"`)
		writeJSON(w, http.StatusUnauthorized, response(nil, nil, errf(CodeInvalidRequest, "Unauthorized: a valid bearer token is required")))
		return
	}
	switch req.Method {
	case http.MethodPost:
		r.servePOST(w, req, ident)
	case http.MethodGet:
		r.serveGET(w, req, ident)
	case http.MethodDelete:
		r.serveDELETE(w, req, ident)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, response(nil, nil, errf(CodeInvalidRequest, "Method not allowed")))
	}
}

func acceptsSSE(req *http.Request) bool {
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && (mt == "text/event-stream" || mt == "*/*" || mt == "text/*") {
			return true
		}
	}
	return false
}

// isModernRequest tells a 2026-07-28 request apart from a 2025-11-25 one.
func isModernRequest(req *http.Request, m *message) bool {
	if req.Header.Get("Mcp-Session-Id") != "" {
		return false
	}
	if v := req.Header.Get("MCP-Protocol-Version"); v != "" {
		return !legacyVersions[v]
	}
	if m.Method == "server/discover" {
		return true
	}
	p, _ := decodeParams(m.Params)
	return str(sub(p, "_meta"), MetaProtocolVersion) != ""
}

func (r *Receiver) servePOST(w http.ResponseWriter, req *http.Request, ident Identity) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, response(nil, nil, errf(CodeInvalidRequest, "Invalid Request: body too large or unreadable")))
		return
	}
	m, rerr := decodeMessage(body)
	if rerr != nil {
		var id json.RawMessage
		if m != nil && m.hasID() {
			id = m.ID
		}
		writeJSON(w, http.StatusBadRequest, response(id, nil, rerr))
		return
	}
	if isModernRequest(req, m) && r.cfg.Eras.extension() {
		r.serveModernPOST(w, req, ident, m)
		return
	}
	if !r.cfg.Eras.legacy() {
		p, _ := decodeParams(m.Params)
		writeJSON(w, http.StatusBadRequest, response(m.ID, nil, r.versionError(str(p, "protocolVersion"))))
		return
	}
	r.serveLegacyPOST(w, req, ident, m)
}

// sessionFor checks the session header. It writes the error and returns nil
// when the session is missing, unknown, or belongs to another tenant.
func (r *Receiver) sessionFor(w http.ResponseWriter, req *http.Request, ident Identity, id json.RawMessage) *session {
	sid := req.Header.Get("Mcp-Session-Id")
	if sid == "" {
		writeJSON(w, http.StatusBadRequest, response(id, nil, errf(CodeInvalidRequest, "Bad Request: Mcp-Session-Id header is required")))
		return nil
	}
	s := r.session(sid)
	if s == nil || s.ident.Tenant != ident.Tenant {
		writeJSON(w, http.StatusNotFound, response(id, nil, errf(CodeInvalidRequest, "Session not found")))
		return nil
	}
	return s
}

func (r *Receiver) serveLegacyPOST(w http.ResponseWriter, req *http.Request, ident Identity, m *message) {
	if v := req.Header.Get("MCP-Protocol-Version"); v != "" && v != VersionLegacy {
		writeJSON(w, http.StatusBadRequest, response(m.ID, nil, errf(CodeInvalidRequest, "Bad Request: Unsupported protocol version: %s (supported: %s)", v, VersionLegacy)))
		return
	}
	if m.Method == "initialize" {
		if !m.isRequest() || req.Header.Get("Mcp-Session-Id") != "" {
			writeJSON(w, http.StatusBadRequest, response(m.ID, nil, errf(CodeInvalidRequest, "Invalid Request: initialize must be a request without a session")))
			return
		}
		r.stats.add(func(c *Counters) { c.Methods[m.Method]++ })
		s := r.newSession(ident, nil)
		p, _ := decodeParams(m.Params)
		s.declareCapabilities(p)
		r.log.Info("session initialized", "tenant", ident.Tenant, "actor", ident.Actor)
		w.Header().Set("Mcp-Session-Id", s.id)
		writeJSON(w, http.StatusOK, response(m.ID, r.initializeResult(), nil))
		return
	}
	s := r.sessionFor(w, req, ident, m.ID)
	if s == nil {
		return
	}
	switch {
	case m.isResponse():
		s.deliverResponse(m)
		w.WriteHeader(http.StatusAccepted)
		return
	case m.isNotification():
		w.WriteHeader(http.StatusAccepted)
		return
	}
	r.stats.add(func(c *Counters) { c.Methods[m.Method]++ })
	resp := newResponder(w, req)
	defer resp.finish()
	rc := &reqCtx{ctx: req.Context(), ident: ident, sess: s, stream: resp.stream}
	rep := r.legacyDispatch(rc, m)
	r.writeReply(w, req, resp, m, rep, false)
}

func (r *Receiver) serveModernPOST(w http.ResponseWriter, req *http.Request, ident Identity, m *message) {
	if !m.isRequest() {
		if m.isNotification() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeJSON(w, http.StatusBadRequest, response(nil, nil, errf(CodeInvalidRequest, "Invalid Request: responses are not accepted in %s", VersionExtension)))
		return
	}
	p, rerr := decodeParams(m.Params)
	if rerr != nil {
		r.writeModernError(w, m.ID, rerr)
		return
	}
	if rerr := r.checkModernHeaders(req, m, p); rerr != nil {
		writeJSON(w, http.StatusBadRequest, response(m.ID, nil, rerr))
		return
	}
	r.stats.add(func(c *Counters) { c.Methods[m.Method]++ })
	resp := newResponder(w, req)
	defer resp.finish()
	rc := &reqCtx{ctx: req.Context(), ident: ident, modern: readModernMeta(p), stream: resp.stream}
	rep := r.modernDispatch(rc, m)
	r.writeReply(w, req, resp, m, rep, true)
}

// checkModernHeaders validates MCP-Protocol-Version, _meta, Mcp-Method and
// Mcp-Name of a 2026-07-28 request.
func (r *Receiver) checkModernHeaders(req *http.Request, m *message, p obj) *rpcError {
	hv := strings.TrimSpace(req.Header.Get("MCP-Protocol-Version"))
	if hv == "" {
		return errf(CodeHeaderMismatch, "Missing MCP-Protocol-Version header")
	}
	meta := sub(p, "_meta")
	var missing []string
	for _, k := range []string{MetaProtocolVersion, MetaClientCapabilities} {
		if _, has := meta[k]; !has {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return errf(CodeInvalidParams, "Invalid params: missing _meta keys: %s", strings.Join(missing, ", "))
	}
	mv := str(meta, MetaProtocolVersion)
	if mv != hv {
		return errf(CodeHeaderMismatch, "MCP-Protocol-Version header does not match _meta %s", MetaProtocolVersion)
	}
	if mv != VersionExtension {
		return r.versionError(mv)
	}
	if v := strings.TrimSpace(req.Header.Get("Mcp-Method")); v != m.Method {
		if v == "" {
			return errf(CodeHeaderMismatch, "Missing Mcp-Method header")
		}
		return errf(CodeHeaderMismatch, "Mcp-Method header %q does not match method %q", v, m.Method)
	}
	var name string
	switch m.Method {
	case "tools/call", "prompts/get":
		name = str(p, "name")
	case "resources/read":
		name = str(p, "uri")
	case "tasks/get", "tasks/update", "tasks/cancel":
		name = str(p, "taskId")
	default:
		return nil
	}
	if v := strings.TrimSpace(req.Header.Get("Mcp-Name")); v != name {
		if v == "" {
			return errf(CodeHeaderMismatch, "Missing Mcp-Name header")
		}
		return errf(CodeHeaderMismatch, "Mcp-Name header does not match the request body")
	}
	return nil
}

// modernStatus maps a 2026-07-28 JSON-RPC error to its HTTP status.
func modernStatus(e *rpcError) int {
	switch e.Code {
	case CodeMethodNotFound:
		return http.StatusNotFound
	case CodeHeaderMismatch, CodeMissingCapability, CodeUnsupportedVersion, CodeInvalidRequest, CodeParseError:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func (r *Receiver) writeModernError(w http.ResponseWriter, id json.RawMessage, e *rpcError) {
	writeJSON(w, modernStatus(e), response(id, nil, e))
}

// responder answers one POST as JSON, or as SSE once something must be
// streamed (a server request during the call) or the SSE knob is on.
type responder struct {
	w      http.ResponseWriter
	req    *http.Request
	mu     sync.Mutex
	sse    *sseStream
	stop   func() bool
	hijack bool
}

func newResponder(w http.ResponseWriter, req *http.Request) *responder {
	return &responder{w: w, req: req}
}

// stream upgrades the response to SSE; nil if the client does not accept it.
func (p *responder) stream() outbound {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sse != nil {
		return p.sse
	}
	if !acceptsSSE(p.req) || p.hijack {
		return nil
	}
	p.sse = newSSE(p.w, http.StatusOK)
	s := p.sse
	p.stop = context.AfterFunc(p.req.Context(), s.close)
	return p.sse
}

func (p *responder) streaming() *sseStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sse
}

func (p *responder) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sse != nil {
		p.sse.close()
		p.stop()
	}
}

// writeReply writes a dispatcher's reply, applying delays and drops.
func (r *Receiver) writeReply(w http.ResponseWriter, req *http.Request, resp *responder, m *message, rep reply, modern bool) {
	_, sseKnob, delayAll := r.knobs.flags()
	if d := delayAll + rep.delay; d > 0 {
		if sleep(req.Context(), d) != nil {
			return
		}
	}
	if req.Context().Err() != nil {
		return
	}
	if rep.dropBefore {
		r.stats.add(func(c *Counters) { c.Dropped++ })
		resp.mu.Lock()
		resp.hijack = true
		resp.mu.Unlock()
		dropConn(w)
		return
	}
	if rep.httpStatus != 0 {
		if resp.streaming() == nil {
			if rep.retryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int((rep.retryAfter+time.Second-1)/time.Second)))
			}
			http.Error(w, http.StatusText(rep.httpStatus), rep.httpStatus)
			return
		}
	}
	msg := response(m.ID, rep.result, rep.err)
	if rep.err == nil && rep.result == nil {
		msg = response(m.ID, obj{}, nil)
	}
	if sseKnob && !modern {
		resp.stream()
	}
	if s := resp.streaming(); s != nil {
		_ = s.send(msg)
		if rep.dropAfter {
			r.stats.add(func(c *Counters) { c.Dropped++ })
			dropConn(w)
		}
		return
	}
	status := http.StatusOK
	if modern && rep.err != nil {
		status = modernStatus(rep.err)
	}
	if rep.dropAfter {
		r.stats.add(func(c *Counters) { c.Dropped++ })
		writeRawAndDrop(w, status, msg)
		return
	}
	writeJSON(w, status, msg)
}

// writeRawAndDrop writes a complete HTTP/1.1 response on the hijacked
// connection and closes it: the client has the answer, the connection dies.
func writeRawAndDrop(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	h, isHijacker := w.(http.Hijacker)
	if !isHijacker {
		writeJSON(w, status, v)
		panic(http.ErrAbortHandler)
	}
	conn, buf, err := h.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	bw := bufio.NewWriter(conn)
	_ = buf
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", status, http.StatusText(status), len(b))
	_, _ = bw.Write(b)
	_ = bw.Flush()
}

func (r *Receiver) serveGET(w http.ResponseWriter, req *http.Request, ident Identity) {
	if !r.cfg.Eras.legacy() {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, response(nil, nil, errf(CodeInvalidRequest, "GET streams are not served in %s", VersionExtension)))
		return
	}
	if !acceptsSSE(req) {
		writeJSON(w, http.StatusNotAcceptable, response(nil, nil, errf(CodeInvalidRequest, "Not Acceptable: the client must accept text/event-stream")))
		return
	}
	if v := req.Header.Get("MCP-Protocol-Version"); v != "" && v != VersionLegacy {
		writeJSON(w, http.StatusBadRequest, response(nil, nil, errf(CodeInvalidRequest, "Bad Request: Unsupported protocol version: %s", v)))
		return
	}
	s := r.sessionFor(w, req, ident, nil)
	if s == nil {
		return
	}
	g := newSSE(w, http.StatusOK)
	s.addGet(g)
	defer g.close()
	select {
	case <-req.Context().Done():
	case <-g.done():
	case <-s.closed:
	case <-r.ctx.Done():
	}
}

func (r *Receiver) serveDELETE(w http.ResponseWriter, req *http.Request, ident Identity) {
	if !r.cfg.Eras.legacy() {
		w.Header().Set("Allow", "POST")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	s := r.sessionFor(w, req, ident, nil)
	if s == nil {
		return
	}
	r.endSession(s)
	w.WriteHeader(http.StatusOK)
}

var _ = time.Second
