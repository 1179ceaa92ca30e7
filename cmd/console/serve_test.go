package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgcluster"
)

// A child process runs the console when this variable names its arguments; the kill -9 test
// uses it to have a real process to kill.
const childArgsEnv = "TASKGATE_TEST_CONSOLE_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgsEnv); args != "" {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := run(ctx, strings.Split(args, "\x1f"), func(string) string { return "" }, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dataDir makes a data directory the postgres account can reach (t.TempDir is private to root).
func dataDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tg-console-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// syncBuffer is an io.Writer that tests read while run writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{ch: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.ch <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var readyLine = regexp.MustCompile(`console ready at (http://127\.0\.0\.1:\d+)`)

// waitFor waits until out matches re or the run ends, and returns the first submatch.
func (b *syncBuffer) waitFor(t testing.TB, re *regexp.Regexp, done <-chan error) string {
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m[1]
		}
		select {
		case <-b.ch:
		case err := <-done:
			t.Fatalf("console exited before %q: %v\n%s", re, err, b.String())
		case <-timeout:
			t.Fatalf("timed out waiting for %q\n%s", re, b.String())
		}
	}
}

// console is a console started in-process by run.
type console struct {
	url    string
	out    *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

func startConsole(t testing.TB, args ...string) *console {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &console{out: newSyncBuffer(), cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), func(string) string { return "" }, c.out)
	}()
	c.url = c.out.waitFor(t, readyLine, c.done)
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop ends the console as Ctrl-C would and returns run's error.
func (c *console) stop(t testing.TB) error {
	t.Helper()
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("console did not stop within 60 s")
		return nil
	}
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// postgresFor lists the pids of postgres servers whose command line names dir.
func postgresFor(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == "postgres" && strings.Contains(string(cmdline), dir) {
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
				if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
					continue
				}
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestServeOnEmbeddedDefaults starts the console as a new user would, with no environment at
// all, checks it serves, keeps the cluster across runs, and leaves no server behind on stop.
func TestServeOnEmbeddedDefaults(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	c := startConsole(t, "--data-dir", dir)
	if code, body := get(t, c.url+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz: %d %s", code, body)
	}
	if code, body := get(t, c.url+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d %s", code, body)
	}
	if code, body := get(t, c.url+"/"); code != 200 || !strings.Contains(body, `data-testid="page-title"`) {
		t.Fatalf("layout page: %d %.300s", code, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "pg", "data", "PG_VERSION")); err != nil {
		t.Fatalf("cluster not in DATA_DIR/pg: %v", err)
	}
	if len(postgresFor(dir)) == 0 {
		t.Fatal("no postgres server running for the data dir")
	}
	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if pids := postgresFor(dir); len(pids) != 0 {
		t.Fatalf("postgres still running after stop: %v", pids)
	}
	// The second run reuses the cluster (no initdb) and finds its own data again.
	c2 := startConsole(t, "--data-dir", dir)
	if strings.Contains(c2.out.String(), "initialising PostgreSQL cluster") {
		t.Fatal("second run initialised the cluster again")
	}
	if code, _ := get(t, c2.url+"/readyz"); code != 200 {
		t.Fatalf("readyz on second run: %d", code)
	}
}

// TestSecondConsoleOnSameDataDirExits checks that a second console refuses the data dir with a
// clear message and the first keeps serving.
func TestSecondConsoleOnSameDataDirExits(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	first := startConsole(t, "--data-dir", dir)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, func(string) string { return "" }, &out)
	if err == nil || !strings.Contains(err.Error(), "in use by another Taskgate console") {
		t.Fatalf("second console: %v", err)
	}
	if code, _ := get(t, first.url+"/readyz"); code != 200 {
		t.Fatalf("first console not ready after the second tried: %d", code)
	}
}

// TestRecoversAfterKill9 kills a console process with SIGKILL, which leaves its PostgreSQL server
// orphaned with its postmaster.pid, and checks the next console on the data dir starts cleanly.
func TestRecoversAfterKill9(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, "\x1f"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	url := ""
	for sc.Scan() {
		if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	if url == "" {
		t.Fatal("child console never became ready")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	orphans := postgresFor(dir)
	if len(orphans) == 0 {
		t.Fatal("killing the console took its server with it; the orphan case is not exercised")
	}
	if _, err := os.Stat(filepath.Join(dir, "pg", "data", "postmaster.pid")); err != nil {
		t.Fatalf("no postmaster.pid left behind: %v", err)
	}
	c := startConsole(t, "--data-dir", dir)
	if !strings.Contains(c.out.String(), "orphaned PostgreSQL server") {
		t.Fatalf("the orphan was not recovered:\n%s", c.out.String())
	}
	if code, body := get(t, c.url+"/readyz"); code != 200 {
		t.Fatalf("readyz after kill -9 recovery: %d %s", code, body)
	}
	if err := c.stop(t); err != nil {
		t.Fatal(err)
	}
	if pids := postgresFor(dir); len(pids) != 0 {
		t.Fatalf("postgres left running: %v", pids)
	}
}

// TestReadyzFollowsTheDatabase stops the database under a running console and starts it again:
// /readyz answers 503 with the reason, then 200, without a console restart.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()
	pgDir := filepath.Join(dir, "external")
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: pgDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Remove() })
	c := startConsole(t, "--database-url", cl.URL("postgres"), "--data-dir", dir)
	if code, _ := get(t, c.url+"/readyz"); code != 200 {
		t.Fatalf("readyz with the database up: %d", code)
	}
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	// Anonymous callers get the state only; why goes to the console's log.
	code, body := get(t, c.url+"/readyz")
	if code != 503 || !strings.Contains(body, `"unavailable"`) || strings.Contains(body, "database unreachable") {
		t.Fatalf("readyz with the database down: %d %s", code, body)
	}
	c.out.waitFor(t, regexp.MustCompile(`(not ready.*database unreachable)`), c.done)
	cl2, err := pgcluster.Start(ctx, pgcluster.Options{Dir: pgDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl2.Stop() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body = get(t, c.url+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz did not recover: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestMissingBinariesNameBothWaysOut(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	_, err := pgcluster.Start(context.Background(), pgcluster.Options{Dir: filepath.Join(dir, "pg"), BinDir: dir})
	if !errors.Is(err, pgcluster.ErrNoBinaries) {
		t.Fatalf("start with no binaries: %v", err)
	}
	if !strings.Contains(err.Error(), "install the PostgreSQL server package") || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("message does not name both ways out: %v", err)
	}
}

func TestHelpDocumentsEveryOption(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][]string{
		"serve":    {"-addr", "-data-dir", "-database-url", "-config", "TASKGATE_ADDR", "TASKGATE_DATA_DIR", "TASKGATE_CONFIG", "DATABASE_URL"},
		"migrate":  {"up", "down N", "status", "-database-url", "-data-dir"},
		"receiver": {"-addr", "-eras", "-tokens"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{cmd, "--help"}, func(string) string { return "" }, &out); err != nil {
			t.Fatalf("%s --help: %v", cmd, err)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q:\n%s", cmd, w, out.String())
			}
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"serve", "migrate", "receiver", "probe", "call", "version"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("console --help lacks %q", w)
		}
	}
	if err := run(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("unknown command accepted")
	}
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "pg")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Remove() })
	url := cl.URL("postgres")
	runOut := func(args ...string) string {
		var out bytes.Buffer
		if err := run(ctx, append([]string{"migrate"}, append(args, "--database-url", url)...), func(string) string { return "" }, &out); err != nil {
			t.Fatalf("migrate %v: %v", args, err)
		}
		return out.String()
	}
	if out := runOut("status"); !strings.Contains(out, "pending") || strings.Contains(out, "applied ") {
		t.Fatalf("status before up:\n%s", out)
	}
	if out := runOut("up"); !regexp.MustCompile(`applied [1-9]\d* migration`).MatchString(out) {
		t.Fatalf("up: %s", out)
	}
	if out := runOut("status"); strings.Contains(out, "pending") {
		t.Fatalf("status after up:\n%s", out)
	}
	if out := runOut("down", "1"); !strings.Contains(out, "rolled back 1 migration") {
		t.Fatalf("down 1: %s", out)
	}
	if out := runOut("status"); !strings.Contains(out, "pending") {
		t.Fatalf("status after down:\n%s", out)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"migrate", "down", "zero", "--database-url", url}, func(string) string { return "" }, &out); err == nil {
		t.Fatal("migrate down zero accepted")
	}
}

// TestCommandsWorkBesideARunningConsole: with the console running on the embedded cluster, a
// console command on the same data dir uses that console's database server instead of failing
// on the data-dir lock or starting a second server.
func TestCommandsWorkBesideARunningConsole(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	c := startConsole(t, "--data-dir", dir)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"users", "add", "--email", "late@example.com", "--role", "support", "--tenants", "all", "--data-dir", dir},
		func(string) string { return "" }, &out); err != nil {
		t.Fatalf("users add beside a running console: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"users", "list", "--data-dir", dir}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "late@example.com") {
		t.Fatalf("the new account is not listed:\n%s", out.String())
	}
	if pids := postgresFor(dir); len(pids) != 1 {
		t.Fatalf("postgres servers for the data dir: %v, want the console's one", pids)
	}
	if code, _ := get(t, c.url+"/readyz"); code != 200 {
		t.Fatalf("console not ready after the command: %d", code)
	}
}
