package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/receiver"
)

// startConsoleEnv starts "console serve" in-process with an environment.
func startConsoleEnv(t *testing.T, env map[string]string, args ...string) *console {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &console{out: newSyncBuffer(), cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), func(k string) string { return env[k] }, c.out)
	}()
	c.url = c.out.waitFor(t, readyLine, c.done)
	t.Cleanup(func() { c.stop(t) })
	return c
}

// TestAPinChangeVoidsTheVerdictAndQueuesARunThroughServe: "console serve" runs the gates of a
// workflow with none, bound to the rollout plan's pins; served again with a pin changed in the
// policy, it voids that verdict, queues a run and stores one bound to the new pin.
func TestAPinChangeVoidsTheVerdictAndQueuesARunThroughServe(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "external")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Remove() })
	dbURL := cl.URL("postgres")
	url := referenceReceiver(t, receiver.ErasLegacy)
	pol := filepath.Join(dir, "policy.yaml")
	writePins := func(version string) {
		t.Helper()
		doc := fmt.Sprintf(gatePolicy, url, "staging") + "    rollout: {pins: {server_version: \"" + version + "\"}}\n"
		if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(ctx) })
	type runRow struct {
		id     int64
		pin    string
		voided bool
		reason string
	}
	runs := func() []runRow {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT id, coalesce(pins->>'server_version', ''), voided_at IS NOT NULL, voided_reason FROM gate_runs WHERE workflow = 'refund' ORDER BY id`)
		if err != nil {
			if strings.Contains(err.Error(), "does not exist") {
				return nil // not migrated yet
			}
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runRow, error) {
			var x runRow
			return x, r.Scan(&x.id, &x.pin, &x.voided, &x.reason)
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	waitRuns := func(n int) []runRow {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			if rs := runs(); len(rs) >= n {
				return rs
			}
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d gate runs stored: %+v", n, runs())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	env := map[string]string{"TASKGATE_GATE_RECHECK": "300ms"}
	writePins("1.0.0")
	c := startConsoleEnv(t, env, "--database-url", dbURL, "--data-dir", filepath.Join(dir, "a"), "--config", pol)
	first := waitRuns(1)[0]
	if first.pin != "1.0.0" || first.voided {
		t.Fatalf("first run %+v, want bound to server_version 1.0.0", first)
	}
	time.Sleep(time.Second) // several rechecks with the same pins
	if rs := runs(); len(rs) != 1 || rs[0].voided {
		t.Fatalf("runs with unchanged pins: %+v, want the one current run", rs)
	}
	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	writePins("1.1.0")
	startConsoleEnv(t, env, "--database-url", dbURL, "--data-dir", filepath.Join(dir, "a"), "--config", pol)
	rs := waitRuns(2)
	if !rs[0].voided || !strings.Contains(rs[0].reason, "pin") {
		t.Fatalf("the run bound to the old pin %+v is not voided for its pins", rs[0])
	}
	if rs[1].pin != "1.1.0" || rs[1].voided {
		t.Fatalf("the repeat run %+v, want bound to server_version 1.1.0", rs[1])
	}
	var reason string
	if err := db.QueryRow(ctx, `SELECT reason FROM gate_queue WHERE run_id = $1`, rs[1].id).Scan(&reason); err != nil || !strings.Contains(reason, "pin") {
		t.Fatalf("queue item of the repeat run: %q %v", reason, err)
	}
}
