package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// driverEnv names the console binary when the test binary is re-executed as
// the client driver the suite starts.
const driverEnv = "TASKGATE_CONFORMANCE_CONSOLE"

// clientScenarios are the suite's client scenarios that apply to a
// requestor; "tools_call@2026-07-28" runs tools_call on the 2026-07-28 wire.
var clientScenarios = []string{
	"initialize", "tools_call", "tools_call@2026-07-28", "sep-2322-client-request-state",
	"http-standard-headers", "http-custom-headers", "http-invalid-tool-headers",
	"json-schema-ref-no-deref", "request-metadata", "elicitation-sep1034-client-defaults", "sse-retry",
}

// TestMain serves as the client driver when the suite starts this binary.
func TestMain(m *testing.M) {
	if console := os.Getenv(driverEnv); console != "" && os.Getenv("MCP_CONFORMANCE_SCENARIO") != "" {
		os.Exit(drive(console, os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// runConsole runs one console command in its own process group, killed
// whole at the deadline.
func runConsole(ctx context.Context, console string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, console, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr // logs stay out of the JSON
	err := cmd.Run()
	return out.String(), err
}

// sampleArgs fills a tool's required arguments from its input schema.
func sampleArgs(schema json.RawMessage) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(schema, &s)
	args := map[string]any{}
	for _, name := range s.Required {
		switch t, _ := s.Properties[name].Type.(string); t {
		case "integer", "number":
			args[name] = 1
		case "boolean":
			args[name] = true
		case "object":
			args[name] = map[string]any{}
		case "array":
			args[name] = []any{}
		default:
			args[name] = "test"
		}
	}
	return args
}

// drive maps the scenario to console commands: `console probe URL`, then
// one `console call` per tool call the scenario's context names, or per
// listed tool (at most 5) with sample arguments. It bounds itself to 25 s,
// inside the suite's own 30 s client timeout.
func drive(console, url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	out, err := runConsole(ctx, console, "probe", url)
	fmt.Println(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	var probe struct {
		Tools []struct {
			Name        string          `json:"name"`
			TaskSupport string          `json:"taskSupport"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	_ = json.Unmarshal([]byte(out), &probe)
	type call struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	}
	var calls []call
	var sc struct {
		ToolCalls []call `json:"toolCalls"`
	}
	if json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &sc) == nil && len(sc.ToolCalls) > 0 {
		calls = sc.ToolCalls
	} else {
		for i, t := range probe.Tools {
			if i == 5 {
				break
			}
			calls = append(calls, call{t.Name, sampleArgs(t.InputSchema)})
		}
	}
	status := 0
	for _, c := range calls {
		args, _ := json.Marshal(c.Arguments)
		cmd := []string{"call", url, c.Name, "--args", string(args), "--answer", "{}", "--timeout", "10s"}
		for _, t := range probe.Tools {
			if t.Name == c.Name && t.TaskSupport == "required" {
				cmd = append(cmd, "--task")
			}
		}
		out, err := runConsole(ctx, console, cmd...)
		fmt.Println(out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "call %s: %v\n", c.Name, err)
			status = 1
		}
	}
	return status
}

// buildConsole builds the console binary for the driver.
func buildConsole(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "console")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/console").CombinedOutput()
	if err != nil {
		t.Fatalf("build the console: %v\n%s", err, out)
	}
	return bin
}

// TestClientScenarios runs the requestor (console probe and call, through
// the driver above) against the suite's client scenarios, against the
// committed expected-failures baseline.
func TestClientScenarios(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		if os.Getenv(driverEnv) == "" {
			if _, err := exec.LookPath("go"); err != nil {
				skipOrFail(t, "go is not on PATH to build the console")
			}
			t.Setenv(driverEnv, buildConsole(t))
		}
	}
	if !inNamespace(t, "TestClientScenarios") {
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	baseline := loadBaseline(t)
	res := runResult{}
	var logs strings.Builder
	for _, sc := range clientScenarios {
		name, version, _ := strings.Cut(sc, "@")
		args := []string{"--command", self, "--scenario", name, "--timeout", "30000"}
		if version != "" {
			// Only for scenarios on the spec timeline: --spec-version
			// skips [extension] scenarios with exit 0.
			args = append(args, "--spec-version", version)
		}
		r, log := runClientSuite(t, 90*time.Second, args...)
		if len(r) == 0 {
			t.Errorf("client scenario %s produced no results:\n%s", sc, log)
		}
		for k, cs := range r {
			if k != name {
				t.Errorf("client scenario %s wrote results for %s", sc, k)
			}
			res[sc] = append(res[sc], cs...)
		}
		logs.WriteString(log)
	}
	// The requestor meets the SHOULDs too (clientInfo in _meta, …): a
	// warning counts as a failure here.
	for sc, cs := range res {
		for i := range cs {
			if cs[i].Status == "WARNING" {
				cs[i].Status = "FAILURE"
			}
		}
		res[sc] = cs
	}
	compare(t, "client-0.2.0-alpha.12", res, baseline, logs.String())
}

// runClientSuite runs `client` with its own deadline, killing the whole
// process group (the suite's own timeout kills only the shell it started).
func runClientSuite(t *testing.T, timeout time.Duration, args ...string) (runResult, string) {
	t.Helper()
	return runSuiteCmd(t, timeout, "client", suiteMain, args...)
}
