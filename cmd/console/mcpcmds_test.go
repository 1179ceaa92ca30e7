package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func mcpGoServer(tb testing.TB) string {
	tb.Helper()
	s := server.NewMCPServer("cli-peer", "1.0", server.WithToolCapabilities(false), server.WithTaskCapabilities(true, true, true))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("echo " + req.GetString("text", "")), nil
	})
	s.AddTool(mcp.NewTool("report", mcp.WithTaskSupport(mcp.TaskSupportRequired)), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.GetBool("fail", false) {
			return mcp.NewToolResultError("report failed"), nil
		}
		return mcp.NewToolResultText("report ready"), nil
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(s))
	tb.Cleanup(ts.Close)
	return ts.URL
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func TestProbePrintsEraCapabilitiesAndTools(t *testing.T) {
	t.Parallel()
	url := mcpGoServer(t)
	var out bytes.Buffer
	if err := runProbe(testCtx(t), []string{url, "--era", "auto"}, &out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Era             string          `json:"era"`
		ProtocolVersion string          `json:"protocolVersion"`
		ServerInfo      map[string]any  `json:"serverInfo"`
		Tasks           json.RawMessage `json:"tasks"`
		Tools           []struct {
			Name        string `json:"name"`
			TaskSupport string `json:"taskSupport"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("probe output is not JSON: %v\n%s", err, out.String())
	}
	if got.Era != "2025-11-25" || got.ProtocolVersion != "2025-11-25" || got.ServerInfo["name"] != "cli-peer" || !strings.Contains(string(got.Tasks), `"call"`) {
		t.Errorf("probe %+v", got)
	}
	modes := map[string]string{}
	for _, tl := range got.Tools {
		modes[tl.Name] = tl.TaskSupport
	}
	if modes["echo"] != "forbidden" || modes["report"] != "required" {
		t.Errorf("tool modes %v", modes)
	}
}

func TestProbeAndCallHelpListOptions(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := runProbe(testCtx(t), []string{"-h"}, &out); err != nil || !strings.Contains(out.String(), "-token") || !strings.Contains(out.String(), "-era") {
		t.Errorf("probe help: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runCall(testCtx(t), []string{"--help"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"-args", "-task", "-ttl", "-token", "-answer", "-era"} {
		if !strings.Contains(out.String(), opt) {
			t.Errorf("call help lacks %s", opt)
		}
	}
}

func TestCallOutcomes(t *testing.T) {
	t.Parallel()
	url := mcpGoServer(t)
	cases := map[string]struct {
		args    []string
		wantErr bool
		want    []string
	}{
		"plain call succeeds":           {[]string{url, "echo", "--args", `{"text":"hi"}`}, false, []string{"echo hi"}},
		"task completes":                {[]string{url, "report", "--task", "--ttl", "60000"}, false, []string{"status working", "status completed", "report ready"}},
		"tool error is not success":     {[]string{url, "report", "--task", "--args", `{"fail":true}`}, true, []string{"report failed"}},
		"plain call of a required tool": {[]string{url, "report"}, true, nil},
		"task of a forbidden tool":      {[]string{url, "echo", "--task"}, true, nil},
	}
	for name, tc := range cases {
		var out bytes.Buffer
		err := runCall(testCtx(t), tc.args, &out)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v\n%s", name, err, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", name, w, out.String())
			}
		}
	}
}

// startEverything runs server-everything (interop/) on 127.0.0.1.
func startEverything(tb testing.TB) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("node is required in CI: %v", err)
		}
		tb.Skip("node not found on PATH: skipping the server-everything CLI test")
	}
	interop, _ := filepath.Abs(filepath.Join("..", "..", "interop"))
	entry := filepath.Join(interop, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = interop
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(node, "--require", filepath.Join(interop, "loopback.cjs"), entry, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT=0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
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
		return "http://" + a + "/mcp"
	case <-time.After(30 * time.Second):
		tb.Fatal("server-everything did not start")
	}
	return ""
}

func TestCallAnswersInputRequiredAgainstServerEverything(t *testing.T) {
	t.Parallel()
	url := startEverything(t)
	var out bytes.Buffer
	err := runCall(testCtx(t), []string{url, "simulate-research-query", "--task", "--args", `{"topic":"jaguar","ambiguous":true}`,
		"--answer", `{"interpretation":"the animal"}`}, &out)
	if err != nil {
		t.Fatalf("call: %v\n%s", err, out.String())
	}
	for _, w := range []string{"era 2025-11-25", "status working", "status input_required", "status completed", "the animal"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
