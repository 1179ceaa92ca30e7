package gates

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// rawAnswer is what one request sent outside the client got.
type rawAnswer struct {
	status int  // HTTP status
	code   int  // JSON-RPC error code (0 = none)
	result bool // a result came
}

// rawRPC sends one JSON-RPC request through the proxy outside the client (for requests the
// client never makes: a malformed task id, a method the era lacks) on the session's identity,
// and reads its answer (JSON or the first matching SSE event), bounded.
func (s *session) rawRPC(ctx context.Context, method string, params map[string]any) (rawAnswer, error) {
	hdr := http.Header{}
	if s.legacy() {
		if sid := s.conn.Info().SessionID; sid != "" {
			hdr.Set("Mcp-Session-Id", sid)
		}
		hdr.Set("MCP-Protocol-Version", eraLegacy)
	} else {
		hdr.Set("MCP-Protocol-Version", eraExtension)
		hdr.Set("Mcp-Method", method)
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    eraExtension,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{mcpclient.ExtensionName: map[string]any{}}},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "taskgate-gates", "version": "gate"},
		}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "gate-raw", "method": method, "params": params})
	if err != nil {
		return rawAnswer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return rawAnswer{}, err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.t.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rawAnswer{}, err
	}
	defer resp.Body.Close()
	out := rawAnswer{status: resp.StatusCode}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	read := func(b []byte) bool {
		if json.Unmarshal(b, &msg) != nil || string(msg.ID) != `"gate-raw"` {
			return false
		}
		if msg.Error != nil {
			out.code = msg.Error.Code
		}
		out.result = msg.Error == nil && len(msg.Result) > 0
		return true
	}
	lim := io.LimitReader(resp.Body, 1<<20)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		sc := bufio.NewScanner(lim)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok && read([]byte(strings.TrimSpace(d))) {
				return out, nil
			}
		}
		if err := sc.Err(); err != nil {
			return out, err
		}
		return out, ctx.Err()
	}
	b, err := io.ReadAll(lim)
	if err != nil {
		return out, err
	}
	read(b)
	return out, nil
}

func (a rawAnswer) String() string {
	switch {
	case a.code != 0:
		return fmt.Sprintf("HTTP %d, JSON-RPC error %d", a.status, a.code)
	case a.result:
		return fmt.Sprintf("HTTP %d, a result", a.status)
	}
	return fmt.Sprintf("HTTP %d without a JSON-RPC answer", a.status)
}

// errorCodes checks the error codes beyond an unknown id: a task id of the wrong type is
// invalid params (-32602); a method the era or the capabilities lack is method not found
// (-32601); tasks/result of a task still working blocks until it ends (2025-11-25) or does
// not exist (the extension, -32601).
func (s *session) errorCodes(ctx context.Context) {
	c := s.begin(SuiteContract, "invalid-task-id")
	cctx, cancel := s.ctx(ctx)
	a, err := s.rawRPC(cctx, "tasks/get", map[string]any{"taskId": 42})
	cancel()
	switch {
	case err != nil:
		s.end(c, Inconclusive, "request failed: "+err.Error())
	case a.code == mcpclient.CodeInvalidParams:
		s.end(c, Pass, "tasks/get with a numeric taskId answered -32602")
	default:
		s.end(c, Fail, "tasks/get with a numeric taskId answered "+a.String()+" (want -32602)")
	}

	c = s.begin(SuiteContract, "method-not-found")
	var missing []string
	if s.legacy() {
		missing = append(missing, "tasks/update") // the extension's, not 2025-11-25's
		if !s.info.Capabilities.TasksList {
			missing = append(missing, "tasks/list")
		}
	} else {
		missing = append(missing, "tasks/list", "tasks/result") // removed in the extension
	}
	verdict, reason := Pass, strings.Join(missing, " and ")+" answered -32601"
	for _, m := range missing {
		cctx, cancel := s.ctx(ctx)
		a, err := s.rawRPC(cctx, m, map[string]any{"taskId": s.prefix + "-none"})
		cancel()
		c.note("%s: %v", m, a)
		switch {
		case err != nil:
			verdict, reason = Inconclusive, m+": request failed: "+err.Error()
		case a.code != mcpclient.CodeMethodNotFound && verdict != Inconclusive:
			verdict, reason = Fail, m+" answered "+a.String()+" (want -32601: the method does not exist here)"
		}
	}
	s.end(c, verdict, reason)

	c = s.begin(SuiteContract, "result-before-terminal")
	if why := s.allowed(s.t.Slow, "slow"); why != "" || !s.tasksOffered() {
		if why == "" {
			why = "the server offers no task-augmented tools/call"
		}
		s.end(c, Inconclusive, why)
		return
	}
	cctx, cancel = s.ctx(ctx)
	defer cancel()
	task, err := s.create(cctx, s.conn, s.t.Slow, s.key(), 0)
	if err != nil {
		s.end(c, Fail, "create: "+err.Error())
		return
	}
	defer func() { _, _ = s.conn.CancelTask(cctx, task.ID) }()
	if !s.legacy() {
		snap, err := s.conn.GetTask(cctx, task.ID)
		a, rerr := s.rawRPC(cctx, "tasks/result", map[string]any{"taskId": task.ID})
		switch {
		case err != nil || rerr != nil:
			s.end(c, Inconclusive, fmt.Sprintf("requests failed: %v %v", err, rerr))
		case !snap.Task.Status.Terminal() && snap.Outcome != nil:
			s.end(c, Fail, "a task still "+string(snap.Task.Status)+" carried an outcome")
		case a.code != mcpclient.CodeMethodNotFound:
			s.end(c, Fail, "tasks/result answered "+a.String()+" (the extension has no tasks/result: want -32601)")
		default:
			s.end(c, Pass, "a working task carries no outcome and tasks/result is method not found, as the extension requires")
		}
		return
	}
	const hold = 500 * time.Millisecond
	wait, wcancel := context.WithTimeout(cctx, hold)
	a, err = s.rawRPC(wait, "tasks/result", map[string]any{"taskId": task.ID})
	wcancel()
	snap, gerr := s.conn.GetTask(cctx, task.ID)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		s.end(c, Pass, "tasks/result of a working task blocked (no answer within "+hold.String()+"), as 2025-11-25 requires")
	case gerr == nil && snap.Task.Status.Terminal():
		s.end(c, Inconclusive, "the slow task ended within "+hold.String()+": nothing to block on")
	case err != nil:
		s.end(c, Inconclusive, "tasks/result: "+err.Error())
	default:
		s.end(c, Fail, "tasks/result of a working task answered "+a.String()+" at once; 2025-11-25 requires it to block until the task ends")
	}
}
