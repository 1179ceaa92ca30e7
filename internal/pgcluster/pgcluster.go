// Package pgcluster runs a private PostgreSQL cluster from the local server binaries.
//
// The console uses it when no DATABASE_URL is configured, and the test harness uses it to give
// every test binary one real cluster. The cluster listens on a Unix socket inside its own
// directory and on no TCP port. When the process runs as root, initdb and the server run as an
// unprivileged account (the "postgres" system account), because PostgreSQL refuses to run as root.
package pgcluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned when initdb or postgres cannot be found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found: " +
	"install the PostgreSQL server package (Debian: apt-get install postgresql) " +
	"or set DATABASE_URL to use an existing database")

// Options configure a cluster.
type Options struct {
	// Dir is the cluster directory (PGDATA lives in Dir/data, the socket in Dir/run).
	Dir string
	// BinDir overrides binary discovery; empty means PATH first, then the newest
	// /usr/lib/postgresql/*/bin.
	BinDir string
	// Settings are extra server settings passed as -c name=value.
	Settings map[string]string
	// Logger receives start and stop events; nil discards them.
	Logger *slog.Logger
	// StartTimeout bounds how long Start waits for the server to accept connections
	// (default 60 s).
	StartTimeout time.Duration
	// RunAs names the account initdb and postgres run as when the process is root
	// (default "postgres"). It is ignored when the process is not root.
	RunAs string
}

// Cluster is a running private PostgreSQL server.
type Cluster struct {
	opts    Options
	binDir  string
	dataDir string
	sockDir string
	cred    *syscall.Credential
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	logFile *os.File

	stopOnce sync.Once
	stopErr  error

	mu          sync.Mutex // guards cmd, done, waitErr and the supervision fields after Start
	stopping    bool
	restarts    int
	lastRestart time.Time
	lastExit    string
}

// FindBinaries returns the directory holding initdb and postgres: PATH first, then the newest
// /usr/lib/postgresql/*/bin. It returns ErrNoBinaries when neither has them.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, dir := range matches {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises the cluster on first use, recovers from a previous unclean stop and starts
// the server. It returns when the server accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.RunAs == "" {
		opts.RunAs = "postgres"
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinaries(); err != nil {
			return nil, err
		}
	} else if !isExec(filepath.Join(binDir, "initdb")) || !isExec(filepath.Join(binDir, "postgres")) {
		return nil, fmt.Errorf("%s: %w", binDir, ErrNoBinaries)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	c := &Cluster{opts: opts, binDir: binDir, done: make(chan struct{})}
	if os.Geteuid() == 0 {
		if c.cred, err = lookupCredential(opts.RunAs); err != nil {
			return nil, err
		}
		if dir, err = c.reachableDir(dir); err != nil {
			return nil, err
		}
	}
	c.dataDir = filepath.Join(dir, "data")
	c.sockDir = filepath.Join(dir, "run")
	if len(c.sockDir)+len("/.s.PGSQL.5432") > 100 {
		// Unix socket paths are limited to about 107 bytes; keep the socket somewhere short.
		sum := sha256.Sum256([]byte(dir))
		c.sockDir = filepath.Join(os.TempDir(), "taskgate-pg-"+hex.EncodeToString(sum[:6]))
	}
	for _, d := range []string{dir, c.sockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
		if err := c.chown(d); err != nil {
			return nil, err
		}
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.recoverStale(ctx); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// lookupCredential resolves the unprivileged account the server runs as under root.
func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as an unprivileged account, "+
			"but the %q account does not exist (install the PostgreSQL server package, which creates it, "+
			"or run the console as another user): %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reachableDir returns dir when the server account can traverse every parent of it; otherwise it
// keeps the cluster under /var/lib/taskgate and leaves a symlink at dir, so that a data dir under
// a private home directory (mode 0700) still works.
func (c *Cluster) reachableDir(dir string) (string, error) {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return target, nil
		}
	}
	if c.canTraverse(filepath.Dir(dir)) {
		return dir, nil
	}
	sum := sha256.Sum256([]byte(dir))
	real := filepath.Join("/var/lib/taskgate", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(real, 0o755); err != nil {
		return "", fmt.Errorf("the %s account cannot reach %s and %s cannot be created: %w",
			c.opts.RunAs, dir, real, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(real, dir); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("link %s to %s: %w", dir, real, err)
	}
	c.opts.Logger.Info("cluster kept outside the data dir: the server account cannot traverse its parents",
		"link", dir, "target", real)
	return real, nil
}

// canTraverse reports whether the server account can reach dir through every ancestor.
func (c *Cluster) canTraverse(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			if os.IsNotExist(err) {
				if d == filepath.Dir(d) {
					return true
				}
				continue
			}
			return false
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		mode := st.Mode().Perm()
		switch {
		case sys.Uid == c.cred.Uid:
			if mode&0o100 == 0 {
				return false
			}
		case sys.Gid == c.cred.Gid:
			if mode&0o010 == 0 {
				return false
			}
		default:
			if mode&0o001 == 0 {
				return false
			}
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid))
	})
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	// A half-written data dir from an interrupted initdb is removed and made again.
	if err := os.RemoveAll(c.dataDir); err != nil {
		return fmt.Errorf("remove incomplete data dir: %w", err)
	}
	c.opts.Logger.Info("initialising PostgreSQL cluster", "dir", c.dataDir, "bin", c.binDir)
	cmd := c.command(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// recoverStale handles a postmaster.pid left behind by a previous run whose owner was killed:
// a server still running for this data dir is stopped; a dead one's pid file is removed.
func (c *Cluster) recoverStale(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	f, err := os.Open(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", pidFile, err)
	}
	line, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if pid > 0 && processIsPostgres(pid, c.dataDir) {
		c.opts.Logger.Warn("stopping an orphaned PostgreSQL server left by a previous run", "pid", pid)
		_ = syscall.Kill(pid, syscall.SIGINT)
		deadline := time.Now().Add(30 * time.Second)
		for processAlive(pid) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			time.Sleep(time.Second)
		}
	}
	if _, err := os.Stat(pidFile); err == nil {
		c.opts.Logger.Warn("removing a stale postmaster.pid", "file", pidFile)
		if err := os.Remove(pidFile); err != nil {
			return fmt.Errorf("remove stale %s: %w", pidFile, err)
		}
	}
	return nil
}

func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.EPERM)
	}
	// A zombie still answers signal 0; treat it as gone.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// processIsPostgres reports whether pid is a postgres server for dataDir.
func processIsPostgres(pid int, dataDir string) bool {
	if !processAlive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 0 && filepath.Base(args[0]) == "postgres" && strings.Contains(string(cmdline), dataDir)
}

func (c *Cluster) start(ctx context.Context) error {
	logPath := filepath.Join(filepath.Dir(c.dataDir), "postgres.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	if err := c.chown(logPath); err != nil {
		lf.Close()
		return err
	}
	c.logFile = lf
	args := []string{"-D", c.dataDir, "-c", "listen_addresses=", "-c", "unix_socket_directories=" + c.sockDir}
	keys := make([]string, 0, len(c.opts.Settings))
	for k := range c.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+c.opts.Settings[k])
	}
	// The server is not tied to ctx: it is stopped by Stop, so a shutdown can be orderly.
	cmd := c.command(context.WithoutCancel(ctx), "postgres", args...)
	cmd.Stdout = lf
	cmd.Stderr = lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.waitErr = err
		c.mu.Unlock()
		close(done)
	}()
	c.opts.Logger.Info("PostgreSQL starting", "pid", cmd.Process.Pid, "socket_dir", c.sockDir)

	deadline := time.Now().Add(c.opts.StartTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(pctx, c.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-done:
			c.mu.Lock()
			werr := c.waitErr
			c.mu.Unlock()
			return fmt.Errorf("postgres exited during start-up (%v); see %s: %s", werr, logPath, tail(logPath, 800))
		case <-ctx.Done():
			c.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return fmt.Errorf("postgres did not accept connections within %s; see %s", c.opts.StartTimeout, logPath)
		}
	}
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// URL returns a connection URL for database on the cluster's Unix socket.
func (c *Cluster) URL(database string) string {
	q := url.Values{"host": {c.sockDir}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + url.PathEscape(database) + "?" + q.Encode()
}

// Done is closed when the server process has exited.
func (c *Cluster) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Pid is the server's process id.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd.Process.Pid
}

// Supervision is what the supervisor has done.
type Supervision struct {
	// Restarts counts the times the server died and was started again.
	Restarts int
	// LastRestart is when it was last started again (zero if never).
	LastRestart time.Time
	// LastExit says how the server last died unexpectedly.
	LastExit string
}

// Supervision reports the supervisor's restarts.
func (c *Cluster) Supervision() Supervision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Supervision{Restarts: c.restarts, LastRestart: c.lastRestart, LastExit: c.lastExit}
}

// Supervise restarts the server whenever it exits without Stop, until ctx ends or Stop is
// called, logging each death and restart. A failed start is retried every second.
func (c *Cluster) Supervise(ctx context.Context) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.Done():
			}
			c.mu.Lock()
			stopping, exit := c.stopping, fmt.Sprint(c.waitErr)
			c.mu.Unlock()
			if stopping {
				return
			}
			c.opts.Logger.Error("PostgreSQL exited unexpectedly: restarting it", "exit", exit)
			for {
				if c.logFile != nil {
					c.logFile.Close()
				}
				err := c.recoverStale(ctx)
				if err == nil {
					err = c.start(ctx)
				}
				if err == nil {
					break
				}
				c.opts.Logger.Error("PostgreSQL restart failed: retrying", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
			c.mu.Lock()
			if c.stopping { // Stop ran during the restart: end the new server too
				cmd, done := c.cmd, c.done
				c.mu.Unlock()
				_ = cmd.Process.Signal(syscall.SIGINT)
				<-done
				return
			}
			c.restarts++
			c.lastRestart, c.lastExit = time.Now(), exit
			n := c.restarts
			c.mu.Unlock()
			c.opts.Logger.Warn("PostgreSQL restarted by the supervisor", "restarts", n, "pid", c.Pid())
		}
	}()
}

// DataDir is the cluster's PGDATA.
func (c *Cluster) DataDir() string { return c.dataDir }

// Stop shuts the server down (fast shutdown: open sessions are ended, nothing is lost) and
// waits for it to exit. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopping = true
		cmd, done := c.cmd, c.done
		c.mu.Unlock()
		if cmd == nil || cmd.Process == nil {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			<-done
			c.stopErr = errors.New("postgres did not stop within 30 s; sent SIGQUIT")
		}
		if c.logFile != nil {
			c.logFile.Close()
		}
		c.opts.Logger.Info("PostgreSQL stopped")
	})
	return c.stopErr
}

// Remove stops the cluster and deletes its directory.
func (c *Cluster) Remove() error {
	err := c.Stop()
	dir := filepath.Dir(c.dataDir)
	if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = rerr
	}
	if filepath.Dir(c.sockDir) != dir {
		_ = os.RemoveAll(c.sockDir)
	}
	return err
}
