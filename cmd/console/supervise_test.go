package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestPrivateClusterIsSupervised kills the console's private PostgreSQL server with SIGKILL:
// the console says so in its log, starts the server again and is ready again by itself.
func TestPrivateClusterIsSupervised(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	c := startConsole(t, "--data-dir", dir)
	pids := postmasters(postgresFor(dir))
	if len(pids) != 1 {
		t.Fatalf("postgres servers for the data dir: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.out.waitFor(t, regexp.MustCompile(`(PostgreSQL exited unexpectedly): restarting it`), c.done)
	c.out.waitFor(t, regexp.MustCompile(`(PostgreSQL restarted by the supervisor)`), c.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, c.url+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 30 s after the restart: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now := postmasters(postgresFor(dir)); len(now) != 1 || now[0] == pids[0] {
		t.Fatalf("postgres servers after the restart: %v (killed %d)", now, pids[0])
	}
}

// postmasters keeps the pids whose parent is not in pids (the server, not its children).
func postmasters(pids []int) []int {
	in := map[int]bool{}
	for _, p := range pids {
		in[p] = true
	}
	var out []int
	for _, p := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		var state byte
		var ppid int
		if i < 0 {
			continue
		}
		if _, err := fmt.Sscanf(string(stat[i+2:]), "%c %d", &state, &ppid); err == nil && !in[ppid] {
			out = append(out, p)
		}
	}
	return out
}
