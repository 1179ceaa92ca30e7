package pgcluster

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned by Lock when another process holds the data dir.
var ErrLocked = errors.New("data dir is in use by another Taskgate console")

// Lock takes an exclusive, advisory lock on dir (a file named console.lock inside it) so that two
// consoles never share one private cluster. The lock dies with the process, so a console killed
// with SIGKILL never leaves it behind. The returned function releases it.
func Lock(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "console.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		holder := strings.TrimSpace(string(b[:n]))
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by pid %s; stop that console or set TASKGATE_DATA_DIR to another directory",
				ErrLocked, dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// ErrNotRunning is returned by Running when no server is serving the cluster in dir.
var ErrNotRunning = errors.New("no PostgreSQL server is running for this cluster")

// Running returns a connection URL for database on the server that another process (a running
// console) keeps for the cluster in dir, read from its postmaster.pid: the socket directory and
// port, once the server reports itself ready. Console commands use it to work beside a running
// console instead of starting a second server.
func Running(dir, database string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 {
		return "", fmt.Errorf("%w: postmaster.pid is incomplete", ErrNotRunning)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, _ := strconv.Atoi(strings.TrimSpace(lines[3]))
	sock := strings.TrimSpace(lines[4])
	if pid <= 0 || port <= 0 || sock == "" || !processAlive(pid) || strings.TrimSpace(lines[7]) != "ready" {
		return "", ErrNotRunning
	}
	q := url.Values{"host": {sock}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + url.PathEscape(database) + "?" + q.Encode(), nil
}
