package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// legacyHTTP is a 2025-11-25 Streamable HTTP session spoken with net/http: every answer is
// read through the size cap (httpRPC) before anything decodes it, and a server request that
// arrives on a response stream is served for as long as its caller allows, never cut at a
// fixed handler timeout. It keeps the Mcp-Session-Id the server gave in answer to
// initialize (or the one resumed) and the negotiated protocol version. It implements mcp-go's
// transport interfaces so that legacyConn speaks to HTTP and stdio alike; legacyConn sends its
// own requests through callHTTP.
type legacyHTTP struct {
	rpc   *httpRPC
	keep  bool // Close leaves the session alive at the server
	sid   atomic.Pointer[string]
	proto atomic.Pointer[string]

	mu        sync.Mutex
	onRequest transport.RequestHandler
	closed    bool
}

func newLegacyHTTP(rpc *httpRPC, keep bool, resumed string) *legacyHTTP {
	s := &legacyHTTP{rpc: rpc, keep: keep}
	s.sid.Store(&resumed)
	empty := ""
	s.proto.Store(&empty)
	return s
}

// Start implements transport.Interface.
func (s *legacyHTTP) Start(context.Context) error { return nil }

// GetSessionId implements transport.Interface.
func (s *legacyHTTP) GetSessionId() string { return *s.sid.Load() }

// setSession keeps the session id an initialize answer carried.
func (s *legacyHTTP) setSession(id string) { s.sid.Store(&id) }

// SetProtocolVersion implements transport.HTTPConnection.
func (s *legacyHTTP) SetProtocolVersion(v string) { s.proto.Store(&v) }

// SetNotificationHandler implements transport.Interface: notifications reach legacyConn
// through callHTTP and the GET stream instead.
func (s *legacyHTTP) SetNotificationHandler(func(mcp.JSONRPCNotification)) {}

// SetRequestHandler implements transport.BidirectionalInterface.
func (s *legacyHTTP) SetRequestHandler(h transport.RequestHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRequest = h
}

// headers sets the session, protocol and parameter headers of one POST.
func (s *legacyHTTP) headers(ctx context.Context, h http.Header) {
	if sid := s.GetSessionId(); sid != "" {
		h.Set(headerSessionID, sid)
	}
	if v := *s.proto.Load(); v != "" {
		h.Set(headerProtoVersion, v)
	}
	for k, v := range ctxParamHeaders(ctx) {
		h[k] = v
	}
}

// SendRequest implements transport.Interface through the bounded reader.
func (s *legacyHTTP) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	rawID, err := json.Marshal(req.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	id := string(rawID)
	if json.Unmarshal(rawID, &id) != nil {
		id = string(rawID)
	}
	req.JSONRPC = mcp.JSONRPC_VERSION
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	hdr := make(http.Header, 4)
	s.headers(ctx, hdr)
	rep, err := s.rpc.post(ctx, id, body, hdr, nil)
	if err != nil {
		return nil, err
	}
	if rep.msg == nil {
		return nil, fmt.Errorf("%w: HTTP %d without a response", ErrTransportLost, rep.status)
	}
	out := &transport.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: req.ID, Result: rep.msg.Result}
	if rep.msg.Error != nil {
		out.Error = &mcp.JSONRPCErrorDetails{Code: rep.msg.Error.Code, Message: rep.msg.Error.Message}
		if len(rep.msg.Error.Data) > 0 {
			out.Error.Data = rep.msg.Error.Data
		}
	}
	return out, nil
}

// SendNotification implements transport.Interface: the answer (202 without a body) is read
// through the size cap and discarded.
func (s *legacyHTTP) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	body, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	status, err := s.postRaw(ctx, body)
	if err != nil {
		return err
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%w: HTTP %d", ErrUnauthorized, status)
	case status == http.StatusNotFound && s.GetSessionId() != "":
		return fmt.Errorf("%w: HTTP 404", ErrSessionGone)
	case status >= 300:
		return &HTTPError{Status: status, Err: ErrMalformed}
	}
	return nil
}

// postRaw POSTs a message that expects no JSON-RPC answer (a notification or a response to a
// server request) and returns the HTTP status; the body is read through the size cap.
func (s *legacyHTTP) postRaw(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.rpc.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: build request: %w", ErrNotDelivered, err)
	}
	s.headers(ctx, req.Header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.rpc.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.rpc.token)
	}
	resp, err := s.rpc.client.Do(req)
	if err != nil {
		return 0, classifySendError(true, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// Close implements transport.Interface: it ends the session at the server with DELETE unless
// the session is to be kept (KeepSessionOnClose).
func (s *legacyHTTP) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	sid := s.GetSessionId()
	if s.keep || sid == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), getStreamWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.rpc.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(headerSessionID, sid)
	if v := *s.proto.Load(); v != "" {
		req.Header.Set(headerProtoVersion, v)
	}
	if s.rpc.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.rpc.token)
	}
	resp, err := s.rpc.client.Do(req)
	if err != nil {
		return nil // the session ends at the server's own timeout
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// HTTPError is an HTTP answer without a JSON-RPC message: a refusal by the server or by a
// gateway in front of it (413, 4xx, 5xx). Status and the start of the body (sanitised,
// bounded) say what it was; Err is the sentinel it counts as (ErrMalformed for a 4xx,
// ErrTransportLost for a 5xx or 429, whose request may have been processed).
type HTTPError struct {
	// Status is the HTTP status code.
	Status int
	// Text is the start of the answer's body, sanitised (empty when there was none).
	Text string
	// Err is the sentinel the refusal counts as.
	Err error
}

// maxHTTPErrorText bounds HTTPError.Text.
const maxHTTPErrorText = 300

// Error implements error.
func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("%v: HTTP %d without a JSON-RPC answer", e.Err, e.Status)
	if e.Text != "" {
		msg += ": " + e.Text
	}
	return msg
}

// Unwrap returns the sentinel.
func (e *HTTPError) Unwrap() error { return e.Err }

// HTTPStatus returns the status of the HTTP refusal in err's chain (400-599), and its text, or
// 0 when err is no HTTP refusal.
func HTTPStatus(err error) (int, string) {
	var h *HTTPError
	if !errors.As(err, &h) || h.Status < 400 || h.Status > 599 {
		return 0, ""
	}
	return h.Status, h.Text
}

// newHTTPError builds the refusal of an answer with status and body.
func newHTTPError(status int, body []byte, sentinel error) *HTTPError {
	if len(body) > 4*maxHTTPErrorText {
		body = body[:4*maxHTTPErrorText]
	}
	return &HTTPError{Status: status, Text: SanitizeMessage(string(bytes.TrimSpace(body)), maxHTTPErrorText), Err: sentinel}
}
