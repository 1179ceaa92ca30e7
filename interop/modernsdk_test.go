package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// ensurePeers installs interop/node_modules with npm ci when the v2 SDK is
// missing, under the lock the other interop tests use.
func ensurePeers(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is required in CI: %v", err)
		}
		t.Skip("node not found on PATH")
	}
	entry := filepath.Join("node_modules", "@modelcontextprotocol", "server", "package.json")
	if _, err := os.Stat(entry); err == nil {
		return node
	}
	lock, err := os.OpenFile(".install.lock", os.O_CREATE|os.O_RDWR, 0o644)
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
	if out, err := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund").CombinedOutput(); err != nil {
		t.Fatalf("npm ci in interop/: %v\n%s", err, out)
	}
	return node
}

// TestPlainCallsToA2026OnlyStdioServer: a stdio server on the v2 TypeScript
// SDK that refuses initialize and offers no tasks extension is spoken to in
// the 2026-07-28 core: plain calls work, task creation is refused locally.
func TestPlainCallsToA2026OnlyStdioServer(t *testing.T) {
	t.Parallel()
	node := ensurePeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{Command: node, Args: []string{"modern-stdio-server.mjs"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if info := conn.Info(); info.Era != mcpclient.EraExtension || info.Capabilities.Extension || info.Name != "modern-only-sdk" {
		t.Fatalf("info %+v", info)
	}
	res, err := conn.CallTool(ctx, "echo", map[string]any{"text": "hi"}, mcpclient.CallOptions{})
	if err != nil || len(res.Texts()) != 1 || res.Texts()[0] != "echo: hi" {
		t.Fatalf("plain call: %+v %v", res, err)
	}
	if _, err := conn.CreateTask(ctx, "echo", map[string]any{"text": "x"}, mcpclient.TaskOptions{}); err == nil {
		t.Error("a task was created on a server without the tasks extension")
	}
}
