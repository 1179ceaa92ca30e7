package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/internal/pgcluster"
)

func clusterDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tg-pgcluster-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "pg")
}

// TestStalePidFileFromDeadServer writes a postmaster.pid naming a process that is gone, as a
// crash of the whole machine would leave, and checks the cluster starts anyway.
func TestStalePidFileFromDeadServer(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(c.DataDir(), "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte("999999\n"+c.DataDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	if err != nil {
		t.Fatalf("start with a stale pid file: %v", err)
	}
	defer c2.Remove()
	conn, err := pgx.Connect(ctx, c2.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query: %v", err)
	}
}

// TestNoTCPListener checks the server listens on its Unix socket only.
func TestNoTCPListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: clusterDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var addrs string
	if err := conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&addrs); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(addrs) != "" {
		t.Fatalf("listen_addresses = %q, want none", addrs)
	}
	if !strings.Contains(c.URL("x"), "host=%2F") {
		t.Fatalf("URL %q does not use a socket directory", c.URL("x"))
	}
}

func TestLockRefusesSecondHolder(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	release, err := pgcluster.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgcluster.Lock(dir); err == nil || !strings.Contains(err.Error(), "held by pid") {
		t.Fatalf("second lock: %v", err)
	}
	release()
	release2, err := pgcluster.Lock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release2()
}

// TestSuperviseRestartsAKilledServer kills the server with SIGKILL and checks the supervisor
// starts it again, the database answers, and a Stop is not undone.
func TestSuperviseRestartsAKilledServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: clusterDir(t)})
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	c.Supervise(ctx)
	old := c.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for c.Supervision().Restarts == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the killed server was not restarted")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if s := c.Supervision(); s.LastRestart.IsZero() || !strings.Contains(s.LastExit, "killed") || c.Pid() == old {
		t.Fatalf("supervision %+v, pid %d (was %d)", s, c.Pid(), old)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("the restarted server does not answer: %v", err)
	}
	conn.Close(ctx)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := c.Supervision().Restarts; n != 1 {
		t.Fatalf("restarts after Stop = %d, want 1", n)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the server runs again after Stop")
	}
}
