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
	"net/url"
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
// A data line is copied straight into the event, fragment by fragment, so an event costs its
// own size, never more than maxLine, however long the line the server sends.
func readSSECursor(r io.Reader, maxLine int, cur *sseCursor, onData func(data []byte) (stop bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data chunkBuf
	var field bytes.Buffer
	for {
		frag, err := br.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				if len(frag) > 0 && bytes.HasPrefix(frag, []byte("data:")) {
					if aerr := appendData(&data, frag, maxLine); aerr != nil {
						return aerr
					}
				}
				if data.Len() > 0 {
					onData(data.Bytes())
				}
				return nil
			}
			return err
		}
		full := err == nil // the whole line is in frag
		line := bytes.TrimRight(frag, "\r\n")
		if len(line) == 0 && full {
			if data.Len() > 0 {
				if onData(data.Bytes()) {
					return nil
				}
				data.Reset()
			}
			continue
		}
		if bytes.HasPrefix(line, []byte("data:")) {
			if err := appendData(&data, line, maxLine); err != nil {
				return err
			}
			for !full { // the rest of a long data line
				frag, err = br.ReadSlice('\n')
				full = err == nil || errors.Is(err, io.EOF)
				if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
					return err
				}
				rest := bytes.TrimRight(frag, "\r\n")
				if data.Len()+len(rest) > maxLine {
					return fmt.Errorf("%w: SSE event over %d bytes", ErrResultTooLarge, maxLine)
				}
				data.add(rest)
				if errors.Is(err, io.EOF) {
					onData(data.Bytes())
					return nil
				}
			}
			continue
		}
		// id:, retry:, event: and comments: kept only as far as needed, bounded.
		field.Reset()
		field.Write(line)
		for !full {
			frag, err = br.ReadSlice('\n')
			full = err == nil
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			if field.Len()+len(frag) > maxLine {
				return fmt.Errorf("%w: line over %d bytes", ErrResultTooLarge, maxLine)
			}
			field.Write(bytes.TrimRight(frag, "\r\n"))
		}
		if cur == nil {
			continue
		}
		if v, ok := bytes.CutPrefix(field.Bytes(), []byte("id:")); ok {
			if id := strings.TrimSpace(string(v)); len(id) <= 256 && !strings.ContainsRune(id, 0) {
				cur.lastID = id
			}
		} else if v, ok := bytes.CutPrefix(field.Bytes(), []byte("retry:")); ok {
			if ms, err := strconv.Atoi(strings.TrimSpace(string(v))); err == nil && ms >= 0 {
				cur.retry = time.Duration(min(ms, 60_000)) * time.Millisecond
			}
		}
	}
}

// appendData adds the value of a data: line (its start) to the event being read.
func appendData(data *chunkBuf, line []byte, maxLine int) error {
	v := bytes.TrimPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	v = bytes.TrimPrefix(v, []byte(" "))
	if data.Len() > 0 {
		data.add([]byte{'\n'})
	}
	if data.Len()+len(v) > maxLine {
		return fmt.Errorf("%w: SSE event over %d bytes", ErrResultTooLarge, maxLine)
	}
	data.add(v)
	return nil
}

// plainJSONString reports whether s is written as itself between quotes in JSON: printable
// ASCII other than the quote, the backslash and the characters json.Marshal escapes for HTML.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// chunkBuf collects bytes in blocks of 1 KiB, then twice the last, up to 64 KiB: growing it
// never copies what it holds, so reading up to a limit costs the limit and one block, a small
// answer (a tasks/get status) costs about its own size, and only a message that fits is made
// contiguous.
type chunkBuf struct {
	parts [][]byte
	n     int
}

const (
	chunkSize  = 64 << 10
	firstChunk = 1 << 10
)

// nextBlock appends an empty block, twice as large as the last one (at most chunkSize).
func (c *chunkBuf) nextBlock() {
	size := firstChunk
	if k := len(c.parts); k > 0 {
		size = min(2*cap(c.parts[k-1]), chunkSize)
	}
	c.parts = append(c.parts, make([]byte, 0, size))
}

// ReadFrom reads r to its end straight into the blocks (io.ReaderFrom: io.Copy needs no
// buffer of its own).
func (c *chunkBuf) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if len(c.parts) == 0 || len(c.parts[len(c.parts)-1]) == cap(c.parts[len(c.parts)-1]) {
			c.nextBlock()
		}
		last := &c.parts[len(c.parts)-1]
		n, err := r.Read((*last)[len(*last):cap(*last)])
		*last = (*last)[:len(*last)+n]
		c.n += n
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Len returns how many bytes it holds.
func (c *chunkBuf) Len() int { return c.n }

// Write appends p (io.Writer; it never fails).
func (c *chunkBuf) Write(p []byte) (int, error) {
	c.add(p)
	return len(p), nil
}

// add appends p.
func (c *chunkBuf) add(p []byte) {
	w := len(p)
	for len(p) > 0 {
		if len(c.parts) == 0 || len(c.parts[len(c.parts)-1]) == cap(c.parts[len(c.parts)-1]) {
			c.nextBlock()
		}
		last := &c.parts[len(c.parts)-1]
		k := min(len(p), cap(*last)-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	c.n += w
}

// Bytes returns the contents, contiguous.
func (c *chunkBuf) Bytes() []byte {
	switch len(c.parts) {
	case 0:
		return nil
	case 1:
		return c.parts[0]
	}
	out := make([]byte, 0, c.n)
	for _, p := range c.parts {
		out = append(out, p...)
	}
	return out
}

// Reset empties it, keeping its first block.
func (c *chunkBuf) Reset() {
	if len(c.parts) > 0 {
		c.parts = c.parts[:1]
		c.parts[0] = c.parts[0][:0]
	}
	c.n = 0
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

var (
	postContentType = []string{"application/json"}
	postAccept      = []string{"application/json, text/event-stream"}
)

// send sends a POST on the client's transport. http.Client.Do copies the request's headers
// for the redirects it might follow, on every request; a Conn follows none (CheckRedirect
// refuses them all), so a redirect is refused here the way Do would refuse it, with
// ErrRedirect, and nothing is copied. A client Do has more to apply to (a cookie jar, an
// overall timeout, credentials in the URL) goes through Do.
func (h *httpRPC) send(req *http.Request) (*http.Response, error) {
	c := h.client
	if c.Transport == nil || c.Jar != nil || c.Timeout != 0 || req.URL.User != nil {
		return c.Do(req)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: err}
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		loc := resp.Header.Get("Location")
		if loc == "" {
			return resp, nil // a 3xx without a Location is an answer, as Do has it
		}
		_ = resp.Body.Close()
		to, perr := req.URL.Parse(loc)
		if perr != nil {
			return nil, &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: fmt.Errorf("%w (to an unparsable Location)", ErrRedirect)}
		}
		return nil, &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: refuseRedirect(&http.Request{URL: to}, nil)}
	}
	return resp, nil
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
	// The fixed values are shared, never written to (net/http only reads a request's headers).
	req.Header["Content-Type"], req.Header["Accept"] = postContentType, postAccept
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.send(req)
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
	var buf chunkBuf
	if n := resp.ContentLength; n > 0 && n <= chunkSize && n <= int64(lim.MaxMessage) {
		// A declared length up to one block is read into one block of that size (and a byte to
		// find the end in): the answer is contiguous without a copy. A server sending less
		// fails the read; more, net/http does not pass on. A larger declared length is not
		// trusted with an allocation before its bytes arrive.
		buf.parts = [][]byte{make([]byte, 0, n+1)}
	}
	_, err = io.Copy(&buf, body2)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return rep, fmt.Errorf("%w: read response: %w", ErrTransportLost, err)
	}
	if buf.Len() > lim.MaxMessage {
		return rep, fmt.Errorf("%w: response over %d bytes", ErrResultTooLarge, lim.MaxMessage)
	}
	data := buf.Bytes()
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
	if p, ok := params.(taskParams); ok && plainJSONString(id) && plainJSONString(method) && plainJSONString(p.TaskID) {
		// tasks/get, the watchers' hot path: the same bytes json.Marshal writes, without its
		// reflection.
		b := make([]byte, 0, 64+len(id)+len(method)+len(p.TaskID))
		b = append(b, `{"jsonrpc":"2.0","id":"`...)
		b = append(b, id...)
		b = append(b, `","method":"`...)
		b = append(b, method...)
		b = append(b, `","params":{"taskId":"`...)
		b = append(b, p.TaskID...)
		return append(b, `"}}`...), nil
	}
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params})
}
