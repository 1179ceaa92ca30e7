package mcpclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewHTTPClient returns an http.Client whose pooled transport suits many
// concurrent watchers polling few servers: unlike the default transport's 2
// idle connections per host it keeps up to maxPerHost (default 256).
func NewHTTPClient(maxPerHost int) *http.Client {
	if maxPerHost <= 0 {
		maxPerHost = 256
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          maxPerHost * 4,
		MaxIdleConnsPerHost:   maxPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 0, // SSE answers may take long; callers bound requests with contexts
	}
	return &http.Client{Transport: t}
}

// ErrRedirect: the server answered with a redirect, which is not followed.
var ErrRedirect = errors.New("mcpclient: the server answered with a redirect; redirects are not followed")

// refuseRedirect is every Conn's CheckRedirect: the MCP endpoint is the configured URL only.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("%w (to %s://%s)", ErrRedirect, req.URL.Scheme, req.URL.Host)
}

// readSSE reads a text/event-stream and calls onData with each event's data
// until the stream ends (io.EOF returned as nil) or onData returns stop=true.
// Lines longer than maxLine fail the read.
func readSSE(r io.Reader, maxLine int, onData func(data []byte) (stop bool)) error {
	return readSSECursor(r, maxLine, nil, onData)
}

// sseCursor is where a stream stood: the last event id and the reconnection time the server
// asked for, to resume a 2025-11-25 response stream the server ended before the response.
type sseCursor struct {
	lastID string
	retry  time.Duration
}

// readSSECursor is readSSE keeping the stream's event id and retry field in cur (when set).
func readSSECursor(r io.Reader, maxLine int, cur *sseCursor, onData func(data []byte) (stop bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data bytes.Buffer
	for {
		line, err := readLine(br, maxLine)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if data.Len() > 0 {
					onData(data.Bytes())
				}
				return nil
			}
			return err
		}
		if len(line) == 0 {
			if data.Len() > 0 {
				if onData(data.Bytes()) {
					return nil
				}
				data.Reset()
			}
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			if data.Len()+len(v) > maxLine {
				return fmt.Errorf("%w: SSE event over %d bytes", ErrResultTooLarge, maxLine)
			}
			data.Write(v)
			continue
		}
		if cur == nil {
			continue // event: and comments are not needed here
		}
		if v, ok := bytes.CutPrefix(line, []byte("id:")); ok {
			if id := strings.TrimSpace(string(v)); len(id) <= 256 && !strings.ContainsRune(id, 0) {
				cur.lastID = id
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("retry:")); ok {
			if ms, err := strconv.Atoi(strings.TrimSpace(string(v))); err == nil && ms >= 0 {
				cur.retry = time.Duration(min(ms, 60_000)) * time.Millisecond
			}
		}
	}
}

// readLine reads one line without its terminator, refusing lines over max.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return line, nil
			}
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("%w: line over %d bytes", ErrResultTooLarge, max)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

// httpRPC posts JSON-RPC messages to one Streamable HTTP endpoint with net/http.
type httpRPC struct {
	url    string
	client *http.Client
	token  string
	lim    Limits
	// resume continues a response stream the server ended after an event id, before the
	// response, with a GET carrying Last-Event-ID after the retry time it asked for
	// (2025-11-25 Streamable HTTP; the 2026-07-28 transport has no such resumption).
	resume bool
}

// maxResumes bounds how often one response stream is resumed.
const maxResumes = 32

// httpReply is the outcome of one POST.
type httpReply struct {
	status int
	header http.Header  // the answer's headers (Mcp-Session-Id)
	msg    *wireMessage // the JSON-RPC response for the request id, if read
}

// post sends body and returns the JSON-RPC response with the given id, read
// from a JSON or SSE answer. Other messages on an SSE answer (server
// requests, notifications) go to onOther. HTTP errors without a JSON-RPC body
// become typed errors.
func (h *httpRPC) post(ctx context.Context, id string, body []byte, header http.Header, onOther func(*wireMessage)) (httpReply, error) {
	if err := ctx.Err(); err != nil {
		return httpReply{}, fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return httpReply{}, fmt.Errorf("%w: build request: %w", ErrNotDelivered, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return httpReply{}, classifySendError(true, err)
	}
	defer resp.Body.Close()
	rep := httpReply{status: resp.StatusCode, header: resp.Header}
	lim := h.lim.withDefaults()
	body2 := io.LimitReader(resp.Body, int64(lim.MaxMessage)+1)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusAccepted && resp.ContentLength == 0:
		return rep, nil
	case mediaType == "text/event-stream" && resp.StatusCode == http.StatusOK:
		var found *wireMessage
		var decodeErr error
		cur := &sseCursor{}
		handle := func(data []byte) bool {
			m, err := decodeMessage(data, lim)
			if err != nil {
				decodeErr = err
				return false // skip undecodable events
			}
			if m.isResponse() && idEquals(m.ID, id) {
				found = m
				return true
			}
			if onOther != nil && !m.isResponse() {
				onOther(m)
			}
			return false
		}
		err := readSSECursor(resp.Body, lim.MaxMessage, cur, handle)
		for n := 0; h.resume && found == nil && err == nil && cur.lastID != "" && ctx.Err() == nil && n < maxResumes; n++ {
			err = h.resumeStream(ctx, header, cur, handle)
		}
		if found != nil {
			rep.msg = found
			return rep, nil
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
			if decodeErr != nil {
				err = decodeErr
			}
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return rep, fmt.Errorf("%w: SSE stream ended without the response: %w", ErrTransportLost, err)
	}
	data, err := io.ReadAll(body2)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return rep, fmt.Errorf("%w: read response: %w", ErrTransportLost, err)
	}
	if len(data) > lim.MaxMessage {
		return rep, fmt.Errorf("%w: response over %d bytes", ErrResultTooLarge, lim.MaxMessage)
	}
	var m *wireMessage
	if len(bytes.TrimSpace(data)) > 0 {
		m, err = decodeMessage(data, lim)
		if err != nil && resp.StatusCode == http.StatusOK {
			return rep, err
		}
	}
	if m != nil && (m.Error != nil || m.Result != nil) {
		rep.msg = m
		return rep, nil
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return rep, fmt.Errorf("%w: HTTP %d", ErrUnauthorized, resp.StatusCode)
	case http.StatusNotFound:
		return rep, fmt.Errorf("%w: HTTP 404", ErrSessionGone)
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		// A gateway or overloaded server answered instead of the MCP server:
		// whether the request was processed is unknown, exactly as when the
		// connection breaks (a task creation is then unacknowledged).
		return rep, newHTTPError(resp.StatusCode, data, ErrTransportLost)
	}
	return rep, newHTTPError(resp.StatusCode, data, ErrMalformed)
}

// resumeStream waits the reconnection time the server asked for (1 s when it named none, at
// least 10 ms) and reads the rest of the stream from a GET carrying Last-Event-ID.
func (h *httpRPC) resumeStream(ctx context.Context, header http.Header, cur *sseCursor, handle func([]byte) bool) error {
	wait := cur.retry
	if wait == 0 {
		wait = time.Second
	}
	if err := sleepCtx(ctx, max(wait, 10*time.Millisecond)); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", cur.lastID)
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return classifySendError(true, err)
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("resume the response stream: HTTP %d", resp.StatusCode)
	}
	before := cur.lastID
	err = readSSECursor(resp.Body, h.lim.withDefaults().MaxMessage, cur, handle)
	if err == nil && cur.lastID == before {
		cur.lastID = "" // nothing new: do not resume again
	}
	return err
}

// idEquals compares a raw JSON id with a string id.
func idEquals(raw json.RawMessage, id string) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s == id
	}
	return strings.TrimSpace(string(raw)) == id
}

// encodeRequest builds a JSON-RPC request with a string id.
func encodeRequest(id, method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params})
}
