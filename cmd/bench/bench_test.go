package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(receiverEnv) != "" {
		if err := runReceiverChild(os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m)
}

// TestSmoke runs every phase of the benchmark at a tiny scale against the test cluster and the
// receiver in a child process, and checks that each figure was measured and bench.json holds
// the keys the table names. It asserts nothing about speed.
func TestSmoke(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "bench.json")
	var log strings.Builder
	err := run(context.Background(), []string{"-database-url", pgtest.URL(t), "-out", out, "-operations", "3000", "-phase", "300ms",
		"-watch-tasks", "20", "-watch-max", "30", "-watch-for", "1500ms",
		"-long-tasks", "40", "-long-poll", "2s", "-long-for", "3s", "-toggles", "3", "-page-requests", "2", "-pair-rounds", "1"}, func(string) string { return "" }, &log)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Start.InsertsPerS <= 0 || r.Start.TasksPerS <= 0 || r.Start.ScaleTasksPerS <= 0 || r.Start.SyncPerS <= 0 {
		t.Errorf("start figures missing: %+v", r.Start)
	}
	// The router's inputs come from memory: the reads it saves show in the statements a start sends.
	if r.Start.StatementsPerRun <= 0 || r.Start.UncachedStatements < r.Start.StatementsPerRun+2 {
		t.Errorf("statements per start: %.2f with cached route inputs, %.2f without", r.Start.StatementsPerRun, r.Start.UncachedStatements)
	}
	// The test cluster runs on this machine: its postmaster is found from a backend, and
	// PostgreSQL's CPU counts in the figures.
	if r.Start.TaskCPU.Postgres <= 0 || r.Start.ScaleCPU.Postgres <= 0 {
		t.Errorf("PostgreSQL's CPU not counted: %+v %+v", r.Start.TaskCPU, r.Start.ScaleCPU)
	}
	if r.Start.WAL.Bytes <= 0 || r.Start.ScaleWAL.Bytes <= 0 || r.Start.ScaleCPU.Total <= 0 {
		t.Errorf("WAL or scale CPU figures missing: %+v %+v %+v", r.Start.WAL, r.Start.ScaleWAL, r.Start.ScaleCPU)
	}
	// A Task start writes at least its operation, its task and a timeline entry, and the MCP
	// calls alone are measured beside it.
	if r.Start.RowsPerStart.Inserted < 3 || r.Start.BareTasksPerS <= 0 || r.Start.CallCeiling <= 0 || r.Start.BareSyncPerS <= 0 {
		t.Errorf("rows per start or bare call figures: %+v", r.Start)
	}
	// The floor (each call between two committed inserts) is measured too, and the scale ratio
	// against an empty ledger alternated with the seeded one, every round of it.
	if r.Start.FloorTasksPerS <= 0 || r.Start.FloorRatio <= 0 || r.Start.FloorSyncPerS <= 0 || r.Start.SyncFloorRatio <= 0 ||
		r.Start.LedgerTasksPerS <= 0 || r.Start.LedgerRatio <= 0 || r.Start.LedgerTaskCPU.Postgres <= 0 {
		t.Errorf("floor figures: %+v", r.Start)
	}
	if r.Start.ScaleEmptyPerS <= 0 || len(r.Start.ScaleRounds) != scaleRounds || r.Start.ScaleEmptyCPU.Total <= 0 || r.Start.ScaleEmptyWAL.Bytes <= 0 {
		t.Errorf("scale figures: %+v", r.Start)
	}
	if r.Start.CapExceeded || r.Start.CapMaxInFlight > r.Start.CapLimit || r.Start.CapRefused == 0 {
		t.Errorf("cap: %d in flight of %d, %d refused", r.Start.CapMaxInFlight, r.Start.CapLimit, r.Start.CapRefused)
	}
	if r.Watch.Polls <= 0 || r.Watch.Amplification <= 0 {
		t.Errorf("watch figures missing: %+v", r.Watch)
	}
	if r.Watch.WaitForTaskCPUMsPoll == nil || *r.Watch.WaitForTaskCPUMsPoll <= 0 || r.Watch.WaitForTaskAmplification == nil {
		t.Errorf("WaitForTask figures missing: %+v", r.Watch)
	}
	// The CPU ratios come from alternating windows of WaitForTask and the watcher's three modes.
	if p := r.Watch.Paired; p == nil || len(p.Rounds) != 1 || p.GetRatio == nil || p.ListRatio == nil || p.NotifyRatio == nil ||
		*p.GetRatio <= 0 || len(p.Rounds[0]) != 4 {
		t.Errorf("paired CPU figures: %+v", r.Watch.Paired)
	}
	if len(r.Watch.Steps) == 0 || len(r.Watch.WaitForTaskSteps) == 0 || r.Watch.LongTasks != 40 || r.Watch.LongAmplification == nil ||
		r.Watch.ListCPUMsPerTaskInterval == nil || r.Watch.NotifyCPUMsPerTaskInterval == nil {
		t.Errorf("watch search, mode or long-run figures missing: %+v", r.Watch)
	}
	if r.KillSwitch.Toggles != 3 || r.KillSwitch.P99Ms <= 0 {
		t.Errorf("kill switch figures: %+v", r.KillSwitch)
	}
	if r.Console.P95Ms <= 0 || len(r.Console.Pages) < 10 || r.Console.Pages["overview"] <= 0 {
		t.Errorf("console figures: %+v", r.Console)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	raw := map[string]map[string]any{}
	for _, sec := range []string{"start", "watch", "killswitch", "console"} {
		var m map[string]any
		if err := json.Unmarshal(top[sec], &m); err != nil {
			t.Fatalf("%s: %v", sec, err)
		}
		raw[sec] = m
	}
	for _, k := range []string{"start.inserts_per_s", "start.tasks_per_s", "start.ratio", "start.scale_ratio", "start.p99_ms",
		"start.call_ceiling_ratio", "start.sync_call_ceiling_ratio", "start.rows_per_start", "start.floor_ratio", "start.sync_floor_ratio", "start.ledger_ratio",
		"start.scale_empty_tasks_per_s", "start.scale_ratio_rounds",
		"watch.max_tasks_1s", "watch.waitfortask_max_tasks_1s", "watch.cpu_ms_per_observation", "watch.waitfortask_cpu_ms_per_poll",
		"watch.bytes_per_task", "watch.amplification", "killswitch.p99_ms", "console.p95_ms"} {
		sec, key, _ := strings.Cut(k, ".")
		if _, ok := raw[sec][key]; !ok {
			t.Errorf("bench.json lacks %s", k)
		}
	}
}

// The seed's ids are the console's: version 7, their first 48 bits the row's milliseconds.
func TestSeedIDIsAVersion7UUIDOfItsTime(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var id string
	var ms int64
	if err := conn.QueryRow(context.Background(), `SELECT `+seedID("timestamptz '2026-01-02 03:04:05.678+00'")+`::text,
		(extract(epoch FROM timestamptz '2026-01-02 03:04:05.678+00') * 1000)::bigint`).Scan(&id, &ms); err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("seed id %s: version %d variant %v err %v", id, u.Version(), u.Variant(), err)
	}
	if at := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, u[:6]...))); at != ms {
		t.Fatalf("seed id %s holds %d ms, want %d", id, at, ms)
	}
}

// The bare and floor calls create the Task a start of bench_capped creates: the same duration.
func TestLongWorkArgumentsAgree(t *testing.T) {
	var args struct {
		DurationMs int64 `json:"duration_ms"`
	}
	if err := json.Unmarshal([]byte(longWork), &args); err != nil || args.DurationMs != longWorkMs {
		t.Fatalf("longWork %s holds %d ms (%v), longWorkMs is %d", longWork, args.DurationMs, err, longWorkMs)
	}
}
