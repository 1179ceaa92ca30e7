// Package mcptest starts real MCP peers for tests on 127.0.0.1: the pinned
// @modelcontextprotocol/server-everything (installed from interop/package-lock.json with
// npm ci) and small mcp-go v1.2.1 servers with or without task support.
package mcptest

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("node is required for the server-everything interop tests in CI: %v", err)
		}
		tb.Skip("node not found on PATH: skipping the server-everything interop test")
	}
	interop := interopDir(tb)
	entry := filepath.Join(interop, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	npmOnce.Do(func() {
		if _, err := os.Stat(entry); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = interop
		if out, err := cmd.CombinedOutput(); err != nil {
			npmErr = err
			tb.Logf("npm ci: %s", out)
		}
	})
	if npmErr != nil {
		tb.Fatalf("npm ci in interop/: %v", npmErr)
	}
	cmd := exec.Command(node, "--require", filepath.Join(interop, "loopback.cjs"), entry, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
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
			tb.Fatalf("server-everything bound %s, want loopback only", a)
		}
		return "http://" + a + "/mcp"
	case <-time.After(30 * time.Second):
		tb.Fatal("server-everything did not start listening")
	}
	return ""
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
