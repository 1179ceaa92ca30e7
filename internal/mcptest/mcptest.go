// Package mcptest starts real MCP peers for tests on 127.0.0.1: the pinned
// @modelcontextprotocol/server-everything and interop/sdk-task-server.mjs on the pinned
// TypeScript SDK (installed from interop/package-lock.json with npm ci), and small mcp-go
// v1.2.1 servers with or without task support.
package mcptest

import (
	"bufio"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

var (
	npmOnce sync.Once
	npmErr  error
)

// interopDir is the repository's interop/ folder.
func interopDir(tb testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("mcptest: cannot locate the source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "interop")
}

// StartEverything runs server-everything (Streamable HTTP) on 127.0.0.1 and returns its MCP
// URL; the process ends at cleanup. It skips when node is absent, except under CI=true where it
// fails.
func StartEverything(tb testing.TB) string {
	tb.Helper()
	node, interop := nodeAndInterop(tb)
	entry := filepath.Join(interop, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	p := startNode(tb, node, "0", "--require", filepath.Join(interop, "loopback.cjs"), entry, "streamableHttp")
	return "http://" + p.addr + "/mcp"
}

// nodeAndInterop finds node and installs the interop peers (npm ci) when they are missing.
// It skips when node is absent, except under CI=true where it fails.
func nodeAndInterop(tb testing.TB) (node, interop string) {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("node is required for the interop tests in CI: %v", err)
		}
		tb.Skip("node not found on PATH: skipping the interop test")
	}
	interop = interopDir(tb)
	npmOnce.Do(func() { npmErr = installInterop(tb, interop) })
	if npmErr != nil {
		tb.Fatalf("npm ci in interop/: %v", npmErr)
	}
	return node, interop
}

// interopInstalled reports whether interop/node_modules holds every peer.
func interopInstalled(interop string) bool {
	for _, p := range []string{
		filepath.Join("@modelcontextprotocol", "server-everything", "dist", "index.js"),
		filepath.Join("@modelcontextprotocol", "sdk", "package.json"),
		filepath.Join("zod", "package.json"),
	} {
		if _, err := os.Stat(filepath.Join(interop, "node_modules", p)); err != nil {
			return false
		}
	}
	return true
}

// installInterop runs npm ci in interop/ when the peers are missing. Test binaries of several
// packages run at once and npm ci first deletes node_modules, so the install is serialised
// across processes with a lock file and the check is made again under the lock.
func installInterop(tb testing.TB, interop string) error {
	if interopInstalled(interop) {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(interop, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	if interopInstalled(interop) {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = interop
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Logf("npm ci: %s", out)
		return err
	}
	return nil
}

// nodeProc is a started node peer.
type nodeProc struct {
	cmd  *exec.Cmd
	addr string // 127.0.0.1:PORT
}

// startNode runs node with args and PORT=port, waits for its "TASKGATE_LISTENING" line and
// checks it bound loopback only. The process is killed at cleanup.
func startNode(tb testing.TB, node, port string, args ...string) *nodeProc {
	tb.Helper()
	cmd := exec.Command(node, args...)
	cmd.Env = append(os.Environ(), "PORT="+port)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &nodeProc{cmd: cmd}
	tb.Cleanup(p.stop)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "TASKGATE_LISTENING" {
				addr <- f[1] + ":" + f[2]
			}
		}
	}()
	select {
	case a := <-addr:
		if !strings.HasPrefix(a, "127.0.0.1:") {
			tb.Fatalf("node peer bound %s, want loopback only", a)
		}
		p.addr = a
		return p
	case <-time.After(30 * time.Second):
		tb.Fatalf("node peer %v did not start listening", args)
	}
	return nil
}

func (p *nodeProc) stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// SDKServer is interop/sdk-task-server.mjs: an MCP server on the official TypeScript SDK
// (pinned in interop/package.json) whose in-memory task store binds each 2025-11-25 task to
// the session that created it. Its tool "slow_job" is task-required.
type SDKServer struct {
	// URL is the MCP endpoint (http://127.0.0.1:PORT/mcp).
	URL string
	// Base is http://127.0.0.1:PORT (GET /counters reports tool calls and live sessions).
	Base string

	tb   testing.TB
	node string
	args []string
	proc *nodeProc
}

// StartSDKServer runs the SDK task server on 127.0.0.1; it stops at cleanup. It skips when
// node is absent, except under CI=true where it fails.
func StartSDKServer(tb testing.TB) *SDKServer {
	tb.Helper()
	node, interop := nodeAndInterop(tb)
	s := &SDKServer{tb: tb, node: node, args: []string{filepath.Join(interop, "sdk-task-server.mjs")}}
	s.proc = startNode(tb, node, "0", s.args...)
	s.Base = "http://" + s.proc.addr
	s.URL = s.Base + "/mcp"
	return s
}

// Restart kills the server and starts a new one on the same port: every session and task is
// forgotten, as when a real server restarts.
func (s *SDKServer) Restart() {
	s.tb.Helper()
	s.proc.stop()
	_, port, _ := strings.Cut(s.proc.addr, ":")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", s.proc.addr)
		if err == nil {
			_ = ln.Close()
			break
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("port %s still taken after the SDK server stopped: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.proc = startNode(s.tb, s.node, port, s.args...)
}

// MCPGoServer builds an mcp-go v1.2.1 server named "mcpgo-peer" with three tools: "echo"
// (no task support, readOnlyHint), "report" (taskSupport optional, destructiveHint false,
// idempotentHint true) and "must" (taskSupport required). withTasks declares the task
// capabilities (list, cancel, tools/call); without it the server offers no Tasks at all and
// its tools carry no taskSupport.
func MCPGoServer(withTasks bool) *server.MCPServer {
	opts := []server.ServerOption{server.WithToolCapabilities(false)}
	if withTasks {
		opts = append(opts, server.WithTaskCapabilities(true, true, true))
	}
	srv := server.NewMCPServer("mcpgo-peer", "1.2.1", opts...)
	text := func(s string) *mcp.CallToolResult { return mcp.NewToolResultText(s) }
	srv.AddTool(mcp.NewTool("echo", mcp.WithString("text"), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("echo " + req.GetString("text", "")), nil
		})
	reportOpts := []mcp.ToolOption{mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true)}
	if withTasks {
		reportOpts = append(reportOpts, mcp.WithTaskSupport(mcp.TaskSupportOptional))
	}
	srv.AddTool(mcp.NewTool("report", reportOpts...),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("report " + req.GetString("month", "")), nil
		})
	if withTasks {
		srv.AddTool(mcp.NewTool("must", mcp.WithTaskSupport(mcp.TaskSupportRequired)),
			func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text("must done"), nil
			})
		// slow works for duration_ms and stops when its context ends: as a task, mcp-go runs
		// it under the creating request's context.
		srv.AddTool(mcp.NewTool("slow", mcp.WithNumber("duration_ms"), mcp.WithTaskSupport(mcp.TaskSupportOptional)),
			func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				t := time.NewTimer(time.Duration(req.GetFloat("duration_ms", 1000)) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
					return text("slow done"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
	}
	return srv
}

// StartMCPGo serves MCPGoServer(withTasks) over Streamable HTTP on 127.0.0.1 and returns its
// URL; it stops at cleanup.
func StartMCPGo(tb testing.TB, withTasks bool) string {
	tb.Helper()
	ts := httptest.NewServer(server.NewStreamableHTTPServer(MCPGoServer(withTasks)))
	tb.Cleanup(ts.Close)
	return ts.URL
}
