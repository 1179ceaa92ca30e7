package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/dbpool"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/manifests"
)

// soakPolicy: %[1]s is the receiver's base URL. Every route is here (task, sync, job_api,
// handoff, reject), the Task workflows once per era.
const soakPolicy = `
tenants: [acme, globex]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: legacy, url: "%[1]s/mcp", era: legacy%[3]s}
  - {name: ext, url: "%[1]s/mcp", era: extension%[4]s}
workflows:
  - {name: refund-legacy, server: legacy, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     stage: full, max_ttl: %[5]s, owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%[1]s/records"}}
  - {name: refund-ext, server: ext, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     stage: full, max_ttl: %[5]s, owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%[1]s/records"}}
  - {name: report-legacy, server: legacy, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s},
     stage: full, max_ttl: 10m, owners: [ops]}
  - {name: report-ext, server: ext, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s},
     stage: full, max_ttl: 10m, owners: [ops]}
  - {name: expiring-legacy, server: legacy, tool: work_required, effect: read_only, task_use: required, fallback: {kind: reject},
     stage: full, max_ttl: %[2]s, owners: [ops]}
  - {name: expiring-ext, server: ext, tool: work_required, effect: read_only, task_use: required, fallback: {kind: reject},
     stage: full, max_ttl: %[2]s, owners: [ops]}
  - {name: balance, server: legacy, tool: work_forbidden, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 5s},
     owners: [ops]}
  - {name: payout, server: legacy, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "%[1]s"},
     owners: [ops], verifier: {kind: job_api}}
  - {name: kyc, server: legacy, tool: work_forbidden, effect: reversible, task_use: never, fallback: {kind: handoff}, owners: [ops]}
  - {name: closure, server: legacy, tool: work_forbidden, effect: effectful, task_use: required, fallback: {kind: reject}, owners: [ops]}
  - {name: questions-legacy, server: legacy, tool: multi_input, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s},
     stage: full, max_ttl: 10m, owners: [ops]}
  - {name: questions-ext, server: ext, tool: multi_input, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s},
     stage: full, max_ttl: 10m, owners: [ops]}
  - {name: greeting, server: legacy, tool: test_tool_with_task, effect: read_only, task_use: required, fallback: {kind: reject},
     stage: full, max_ttl: 10m, owners: [ops], keep_result: true}
`

// replica is one console serve process.
type replica struct {
	n       int
	addr    string
	log     string
	metrics string // its --metrics-addr

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	id   string // its watcher replica id
}

func (r *replica) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// world is one soak run's processes: PostgreSQL, the receiver and the console replicas.
type world struct {
	o       Options
	dir     string
	consBin string
	policy  string
	rcvAddr string
	dbURL   string
	pgOpts  pgcluster.Options

	pgMu    sync.Mutex
	cluster *pgcluster.Cluster
	pool    *pgxpool.Pool

	rcvMu    sync.Mutex
	rcv      *receiverProc
	rcvSeen  []rcvState // states of receivers already stopped
	replicas []*replica
	knownIDs map[string]bool
	idMu     sync.Mutex
	token    string
	client   *http.Client

	// serverTokens, when set, are the receiver's two bearer tokens: the legacy server's
	// reaches the consoles as {env: SOAK_SERVER_TOKEN}, the extension server's as
	// {file: PATH}.
	serverTokens [2]string
	// metrics serves each replica's /metrics on a loopback port of its own.
	metrics bool
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// buildConsole builds the console once, unless a binary was given.
func buildConsole(ctx context.Context, o Options, dir string, log io.Writer) (string, error) {
	if o.Console != "" {
		return o.Console, nil
	}
	out := filepath.Join(dir, "console")
	fmt.Fprintln(log, "soak: building the console...")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/taskgate/taskgate/cmd/console") //nolint:gosec // this module's console, built into the run's directory
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the console: %w", err)
	}
	return out, nil
}

func (w *world) setup(ctx context.Context, log io.Writer) error {
	var err error
	if w.consBin, err = buildConsole(ctx, w.o, w.dir, log); err != nil {
		return err
	}
	w.pgOpts = pgcluster.Options{Dir: filepath.Join(w.dir, "pg"), Settings: map[string]string{
		"max_connections": "300", "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}}
	if err := os.Chmod(w.dir, 0o755); err != nil { //nolint:gosec // the server account must reach its cluster directory
		return err
	}
	if w.cluster, err = pgcluster.Start(ctx, w.pgOpts); err != nil {
		return fmt.Errorf("private PostgreSQL: %w", err)
	}
	admin, err := pgx.Connect(ctx, w.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE taskgate")
	admin.Close(ctx)
	if err != nil {
		return err
	}
	w.dbURL = w.cluster.URL("taskgate")
	cfg, err := dbpool.Config(w.dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if w.rcvAddr, err = freeAddr(); err != nil {
		return err
	}
	if w.rcv, err = startReceiver(ctx, w.rcvAddr, w.receiverTokens()); err != nil {
		return err
	}
	w.policy = filepath.Join(w.dir, "policy.yaml")
	expiry := strconv.Itoa(int(w.o.ExpiringTTL.Seconds())) + "s"
	var envTok, fileTok string
	if w.serverTokens[0] != "" {
		tokFile := filepath.Join(w.dir, "server-token")
		if err := os.WriteFile(tokFile, []byte(w.serverTokens[1]+"\n"), 0o600); err != nil {
			return err
		}
		envTok, fileTok = ", token: {env: SOAK_SERVER_TOKEN}", fmt.Sprintf(", token: {file: %q}", tokFile)
	}
	taskTTL := strconv.Itoa(int(w.o.TaskTTL.Seconds())) + "s"
	if err := os.WriteFile(w.policy, fmt.Appendf(nil, soakPolicy, "http://"+w.rcvAddr, expiry, envTok, fileTok, taskTTL), 0o600); err != nil {
		return err
	}
	w.client = &http.Client{Timeout: 30 * time.Second}
	w.knownIDs = map[string]bool{}
	for i := range w.o.Replicas {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		r := &replica{n: i + 1, addr: addr, log: filepath.Join(w.dir, fmt.Sprintf("console-%d.log", i+1)), metrics: "off"}
		if w.metrics {
			if r.metrics, err = freeAddr(); err != nil {
				return err
			}
		}
		w.replicas = append(w.replicas, r)
		// One at a time: the first migrates the schema, and each new watcher id is told apart.
		if err := w.startReplica(ctx, r); err != nil {
			return fmt.Errorf("replica %d: %w", r.n, err)
		}
	}
	as := auth.NewStore(w.pool, auth.Options{})
	_, tok, err := as.CreateToken(ctx, audit.Actor{Name: "soak", Kind: audit.KindCLI, Role: "admin"}, auth.AllTenants, "soak traffic",
		auth.TenantScope("acme", "globex"))
	if err != nil {
		return fmt.Errorf("API token: %w", err)
	}
	w.token = tok
	// Traffic starts once both servers' manifests are recorded, so routes are decided on them.
	ms := manifests.NewStore(w.pool)
	for _, name := range []string{"legacy", "ext"} {
		for {
			st, err := ms.Status(ctx, name)
			if err == nil && st.Latest != nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// startReplica starts r's console and waits until it is ready and its watcher beats.
func (w *world) startReplica(ctx context.Context, r *replica) error {
	lf, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// Not tied to ctx: a replica ends by kill or close, as the soak decides.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), w.consBin, "serve", "--database-url", w.dbURL, "--addr", r.addr, "--config", w.policy, //nolint:gosec // the console just built
		"--metrics-addr", r.metrics, "--log-format", "json", "--recovery-grace", w.o.RecoveryGrace.String())
	cmd.Env = append(os.Environ(), "TASKGATE_DATA_DIR="+filepath.Join(w.dir, fmt.Sprintf("data-%d", r.n)))
	if w.serverTokens[0] != "" {
		cmd.Env = append(cmd.Env, "SOAK_SERVER_TOKEN="+w.serverTokens[0])
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("console exited during start-up; see %s", r.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if w.ready(ctx, r) {
			break
		}
		if time.Now().After(deadline) {
			w.kill(r)
			return fmt.Errorf("console not ready within 90s; see %s", r.log)
		}
	}
	// Its watcher's id: the heartbeat row that appeared since the last start.
	for time.Now().Before(deadline) {
		ids, err := w.replicaIDs(ctx)
		if err == nil {
			w.idMu.Lock()
			for _, id := range ids {
				if !w.knownIDs[id] {
					w.knownIDs[id] = true
					r.mu.Lock()
					r.id = id
					r.mu.Unlock()
				}
			}
			w.idMu.Unlock()
			if r.id != "" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("the replica's watcher never beat")
}

func (w *world) replicaIDs(ctx context.Context) ([]string, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := w.pool.Query(qctx, `SELECT replica FROM watcher_replicas`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (w *world) ready(ctx context.Context, r *replica) bool {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+r.addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill ends r's console with SIGKILL and waits for it.
func (w *world) kill(r *replica) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// live returns the replicas whose process runs, in random order.
func (w *world) live(rng func(int) int) []*replica {
	var out []*replica
	for _, r := range w.replicas {
		if r.running() {
			out = append(out, r)
		}
	}
	for i := len(out) - 1; i > 0; i-- {
		j := rng(i + 1)
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// receiverTokens is the receiver's token bindings (TOKEN=TENANT:ACTOR,...), "" for none.
func (w *world) receiverTokens() string {
	if w.serverTokens[0] == "" {
		return ""
	}
	return w.serverTokens[0] + "=acme:taskgate," + w.serverTokens[1] + "=acme:taskgate"
}

// restartReceiver stops the receiver (its tasks vanish) and starts a new one on its address.
func (w *world) restartReceiver(ctx context.Context) error {
	w.rcvMu.Lock()
	defer w.rcvMu.Unlock()
	st, err := w.rcv.stop()
	if err != nil {
		return fmt.Errorf("stop the receiver: %w", err)
	}
	w.rcvSeen = append(w.rcvSeen, st)
	if w.rcv, err = startReceiver(ctx, w.rcvAddr, w.receiverTokens()); err != nil {
		return fmt.Errorf("start the receiver again: %w", err)
	}
	return nil
}

// receiverStates stops the current receiver and returns what every receiver saw.
func (w *world) receiverStates() ([]rcvState, error) {
	w.rcvMu.Lock()
	defer w.rcvMu.Unlock()
	if w.rcv != nil {
		st, err := w.rcv.stop()
		w.rcv = nil
		if err != nil {
			return nil, err
		}
		w.rcvSeen = append(w.rcvSeen, st)
	}
	return slices.Clone(w.rcvSeen), nil
}

// stopDatabase stops PostgreSQL; startDatabase starts it again on the same data.
func (w *world) stopDatabase() error {
	w.pgMu.Lock()
	defer w.pgMu.Unlock()
	return w.cluster.Stop()
}

func (w *world) startDatabase(ctx context.Context) error {
	w.pgMu.Lock()
	defer w.pgMu.Unlock()
	c, err := pgcluster.Start(ctx, w.pgOpts)
	if err != nil {
		return err
	}
	w.cluster = c
	return nil
}

func (w *world) close() {
	for _, r := range w.replicas {
		r.mu.Lock()
		cmd, done := r.cmd, r.done
		r.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				w.kill(r)
			}
		}
	}
	w.rcvMu.Lock()
	if w.rcv != nil {
		_, _ = w.rcv.stop()
	}
	w.rcvMu.Unlock()
	if w.pool != nil {
		w.pool.Close()
	}
	w.pgMu.Lock()
	if w.cluster != nil {
		_ = w.cluster.Remove()
	}
	w.pgMu.Unlock()
}
