package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// frameworkDir holds mcp-framework 0.2.22 and its zod 3.
const frameworkDir = "mcp-framework"

// ensureFramework installs the pinned mcp-framework peer with npm ci when
// it is missing, under a lock so parallel test binaries do not race.
func ensureFramework(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is required in CI: %v", err)
		}
		t.Skip("node not found on PATH")
	}
	entry := filepath.Join(frameworkDir, "node_modules", "mcp-framework", "package.json")
	if _, err := os.Stat(entry); err == nil {
		return node
	}
	lock, err := os.OpenFile(filepath.Join(frameworkDir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock: %v", err)
	}
	if _, err := os.Stat(entry); err == nil {
		return node
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = frameworkDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", frameworkDir, err, out)
	}
	return node
}

// rawPeer is a raw JSON-RPC session with the peer on stdio, to observe what
// it answers to requests Taskgate's client would never send.
type rawPeer struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
	id  int
}

func startRaw(t *testing.T, node string) *rawPeer {
	cmd := exec.Command(node, filepath.Join(frameworkDir, "server.mjs"))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the peer: %v", err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	p := &rawPeer{t: t, in: in, out: sc}
	p.call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}})
	_, _ = fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

type rawAnswer struct {
	Result json.RawMessage     `json:"result"`
	Error  *mcpclient.RPCError `json:"error"`
}

// call sends a request and returns its answer and how long it took.
func (p *rawPeer) call(method string, params any) (rawAnswer, time.Duration) {
	p.t.Helper()
	p.id++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.id, "method": method, "params": params})
	start := time.Now()
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("write %s: %v", method, err)
	}
	for p.out.Scan() {
		var m struct {
			ID *int `json:"id"`
			rawAnswer
		}
		if json.Unmarshal(p.out.Bytes(), &m) == nil && m.ID != nil && *m.ID == p.id {
			return m.rawAnswer, time.Since(start)
		}
	}
	p.t.Fatalf("%s: the peer closed its output", method)
	return rawAnswer{}, 0
}

// deviation is one behaviour of the peer that departs from 2025-11-25, the
// era it was negotiated in, and the era whose rule it matches instead.
type deviation struct {
	behaviour string
	matches   string
}

// TestTolerantRequestorAgainstMCPFramework: mcp-framework 0.2.22 negotiates
// 2025-11-25 with Tasks but bends four of its rules. Each is observed and
// recorded with the era it matches; Taskgate's requestor copes with each
// without crashing and without repeating a call.
func TestTolerantRequestorAgainstMCPFramework(t *testing.T) {
	t.Parallel()
	node := ensureFramework(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var seen []deviation

	// Observed on the wire, with a raw session.
	raw := startRaw(t, node)
	a, _ := raw.call("tools/call", map[string]any{"name": "required_only", "arguments": map[string]any{}})
	if a.Error == nil && strings.Contains(string(a.Result), "ran without a task") {
		seen = append(seen, deviation{"a taskSupport required tool runs as a plain call (2025-11-25: -32601)", "2026-07-28: the server decides how a call runs"})
	}
	a, _ = raw.call("tools/call", map[string]any{"name": "report", "arguments": map[string]any{"topic": "raw"}, "task": map[string]any{"ttl": 60000}})
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	_ = json.Unmarshal(a.Result, &created)
	if created.Task.TaskID == "" {
		t.Fatalf("raw task creation: %+v %s", a.Error, a.Result)
	}
	a, took := raw.call("tasks/result", map[string]any{"taskId": created.Task.TaskID})
	if a.Error != nil && took < 250*time.Millisecond {
		seen = append(seen, deviation{"tasks/result on a working task answers an error at once instead of blocking (2025-11-25: blocks until terminal)", "2026-07-28: results are read by polling tasks/get"})
	}
	a, _ = raw.call("tasks/get", map[string]any{"taskId": "no-such-task"})
	if a.Error != nil && a.Error.Code == -32603 {
		seen = append(seen, deviation{"an unknown task id is -32603 (both eras: -32602)", "neither era"})
	}

	// Taskgate's requestor against the same peer.
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{Command: node, Args: []string{filepath.Join(frameworkDir, "server.mjs")}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if info := conn.Info(); info.Era != mcpclient.EraLegacy || !info.Capabilities.TasksToolsCall {
		t.Fatalf("info %+v", info)
	}
	task, err := conn.CreateTask(ctx, "failing", nil, mcpclient.TaskOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("create failing: %v", err)
	}
	out, err := conn.AwaitOutcome(ctx, task.ID)
	if err != nil {
		t.Fatalf("await failing: %v", err)
	}
	if out.Status == mcpclient.StatusCompleted && out.ToolError {
		seen = append(seen, deviation{"a tool error (isError) ends the task completed (2025-11-25: failed)", "2026-07-28: completed with an isError result"})
	} else {
		t.Errorf("failing task outcome %+v", out)
	}
	task, err = conn.CreateTask(ctx, "report", map[string]any{"topic": "jaguar"}, mcpclient.TaskOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("create report: %v", err)
	}
	out, err = conn.AwaitOutcome(ctx, task.ID)
	if err != nil || out.Status != mcpclient.StatusCompleted || out.Result == nil || len(out.Result.Texts()) != 1 || out.Result.Texts()[0] != "report on jaguar ready" {
		t.Fatalf("report outcome %+v (texts %q) %v", out, out.Result.Texts(), err)
	}
	if _, err := conn.GetTask(ctx, "no-such-task"); err == nil {
		t.Error("an unknown task id was read as a task")
	}
	if _, err := conn.CallTool(ctx, "required_only", nil, mcpclient.CallOptions{}); !errors.Is(err, mcpclient.ErrToolRequiresTask) {
		t.Errorf("plain call of a required tool: %v, want it refused before sending", err)
	}
	res, err := conn.CallTool(ctx, "executions", nil, mcpclient.CallOptions{})
	if err != nil || len(res.Texts()) != 1 {
		t.Fatalf("executions: %+v %v", res, err)
	}
	var counts map[string]int
	if err := json.Unmarshal([]byte(res.Texts()[0]), &counts); err != nil {
		t.Fatalf("executions %q: %v", res.Texts()[0], err)
	}
	// The raw session is another process: these counts are the requestor's alone.
	if counts["failing"] != 1 || counts["report"] != 1 || counts["required_only"] != 0 {
		t.Errorf("executions %v: every call exactly once, the required tool never", counts)
	}

	want := 4
	if len(seen) != want {
		t.Errorf("observed %d of the %d recorded deviations: %+v", len(seen), want, seen)
	}
	for _, d := range seen {
		t.Logf("deviation: %s — matches %s", d.behaviour, d.matches)
	}
}
