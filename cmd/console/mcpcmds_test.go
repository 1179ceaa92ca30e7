package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/receiver"
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
	return mcptest.StartEverything(tb)
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

// referenceReceiver serves the reference receiver (both eras unless eras
// says otherwise) on 127.0.0.1 and returns its MCP endpoint.
func referenceReceiver(tb testing.TB, eras receiver.Eras) string {
	tb.Helper()
	r := receiver.New(receiver.Config{Eras: eras, DefaultPollInterval: 50 * time.Millisecond})
	ts := httptest.NewServer(r.Handler())
	tb.Cleanup(func() {
		ts.Close()
		r.Close()
	})
	return ts.URL + "/mcp"
}

func TestProbeAgainstTheReferenceReceiverInEachEra(t *testing.T) {
	t.Parallel()
	url := referenceReceiver(t, receiver.ErasBoth)
	cases := map[string]struct {
		era, want, capsKey, mode string
	}{
		"auto picks the extension":  {"auto", "2026-07-28", "extensions", "server-decides"},
		"legacy forced":             {"legacy", "2025-11-25", "tasks", "required"},
		"extension forced":          {"extension", "2026-07-28", "extensions", "server-decides"},
		"legacy by version":         {"2025-11-25", "2025-11-25", "tasks", "required"},
		"extension by version name": {"2026-07-28", "2026-07-28", "extensions", "server-decides"},
	}
	for name, tc := range cases {
		var out bytes.Buffer
		if err := runProbe(testCtx(t), []string{url, "--era", tc.era}, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got struct {
			Era        string            `json:"era"`
			ServerInfo map[string]string `json:"serverInfo"`
			Evidence   map[string]any    `json:"evidence"`
			Tools      []struct {
				Name        string `json:"name"`
				TaskSupport string `json:"taskSupport"`
			} `json:"tools"`
		}
		raw := map[string]json.RawMessage{}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || json.Unmarshal(out.Bytes(), &raw) != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, out.String())
		}
		if got.Era != tc.want || got.ServerInfo["name"] != "taskgate-reference-receiver" || len(raw[tc.capsKey]) == 0 || string(raw[tc.capsKey]) == "null" {
			t.Errorf("%s: %s", name, out.String())
		}
		modes := map[string]string{}
		for _, tl := range got.Tools {
			modes[tl.Name] = tl.TaskSupport
		}
		if modes[receiver.ToolWorkRequired] != tc.mode {
			t.Errorf("%s: work_required mode %q", name, modes[receiver.ToolWorkRequired])
		}
	}
	// A legacy-only receiver cannot be forced into the extension.
	legacyOnly := referenceReceiver(t, receiver.ErasLegacy)
	var out bytes.Buffer
	if err := runProbe(testCtx(t), []string{legacyOnly, "--era", "extension"}, &out); err == nil || !strings.Contains(err.Error(), "does not support the tasks extension") {
		t.Errorf("extension forced on a legacy-only receiver: %v", err)
	}
	if err := runProbe(testCtx(t), []string{url, "--era", "modern"}, &out); err == nil {
		t.Error("an unknown --era was accepted")
	}
}

func TestCallAgainstTheReferenceReceiverInBothEras(t *testing.T) {
	t.Parallel()
	url := referenceReceiver(t, receiver.ErasBoth)
	type tc struct {
		args    []string
		wantErr string
		want    []string
	}
	for _, era := range []struct{ flag, version, toolError string }{
		{"legacy", "2025-11-25", "failed — tool error"},
		{"extension", "2026-07-28", "completed — tool error"},
	} {
		cases := map[string]tc{
			"input answered": {[]string{url, receiver.ToolWorkOptional, "--task", "--args", `{"outcome":"input"}`, "--answer", `{"approve":true}`},
				"", []string{"status working", "status input_required", "input ", "status completed", "approved and done"}},
			"input declined without --answer": {[]string{url, receiver.ToolWorkOptional, "--task", "--args", `{"outcome":"input"}`},
				era.toolError, []string{"Not approved: decline"}},
			"tool error": {[]string{url, receiver.ToolFailingJob, "--task", "--args", `{"delay_ms":10}`}, era.toolError, nil},
			"protocol error": {[]string{url, receiver.ToolProtocolErrorJob, "--task"},
				"failed — protocol error", []string{"status failed", "-32603"}},
			"plain call":    {[]string{url, receiver.ToolGreet, "--args", `{"name":"Ops"}`}, "", []string{"Hello, Ops!"}},
			"ttl requested": {[]string{url, receiver.ToolSlowCompute, "--task", "--ttl", "60000", "--args", `{"seconds":0.05}`}, "", []string{"status completed", "Computed result"}},
		}
		for name, c := range cases {
			var out bytes.Buffer
			err := runCall(testCtx(t), append(c.args, "--era", era.flag), &out)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("%s/%s: %v\n%s", era.flag, name, err, out.String())
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("%s/%s: error %v, want %q\n%s", era.flag, name, err, c.wantErr, out.String())
			}
			for _, w := range append(c.want, "era "+era.version) {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%s/%s: output lacks %q:\n%s", era.flag, name, w, out.String())
				}
			}
		}
	}
	// A task-only tool called plainly: refused in legacy before sending,
	// -32021 in the extension.
	var out bytes.Buffer
	if err := runCall(testCtx(t), []string{url, receiver.ToolWorkRequired, "--era", "legacy"}, &out); err == nil || !strings.Contains(err.Error(), "requires task augmentation") {
		t.Errorf("legacy plain call of a required tool: %v", err)
	}
	if err := runCall(testCtx(t), []string{url, receiver.ToolWorkRequired, "--era", "extension"}, &out); err == nil || !strings.Contains(err.Error(), "-32021") {
		t.Errorf("extension plain call of a required tool: %v", err)
	}
	// Auto detection prints the era it chose.
	out.Reset()
	if err := runCall(testCtx(t), []string{url, receiver.ToolGreet}, &out); err != nil || !strings.HasPrefix(out.String(), "era 2026-07-28\n") {
		t.Errorf("auto: %v\n%s", err, out.String())
	}
}

// TestCallAgainstAReceiverStartedByTheConsole runs "console receiver" on
// 127.0.0.1:0 through run and calls it with "console call".
func TestCallAgainstAReceiverStartedByTheConsole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testCtx(t))
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"receiver", "--addr", "127.0.0.1:0", "--eras", "legacy"}, func(string) string { return "" }, pw)
		_ = pw.Close()
	}()
	endpoint := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "reference receiver: MCP endpoint "); ok {
				endpoint <- u
			}
		}
	}()
	var url string
	select {
	case url = <-endpoint:
	case err := <-done:
		t.Fatalf("receiver ended: %v", err)
	case <-ctx.Done():
		t.Fatal("the receiver never printed its endpoint")
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("endpoint %q", url)
	}
	var out bytes.Buffer
	err := runCall(ctx, []string{url, receiver.ToolWorkOptional, "--task", "--args", `{"outcome":"input","input_mode":"url"}`, "--answer", `{}`}, &out)
	if err != nil || !strings.Contains(out.String(), "era 2025-11-25") || !strings.Contains(out.String(), "status completed") {
		t.Errorf("call: %v\n%s", err, out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("receiver: %v", err)
	}
}
