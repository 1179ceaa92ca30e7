// Command bench measures Taskgate against a real PostgreSQL cluster and the reference receiver
// running in its own process on loopback: the start path beside the same server's plain
// single-row insert rate, the start rate on a large ledger, the console's pages at that size, the
// kill switch across three replicas and the durable watcher. It prints a table and writes
// bench.json.
//
//	go run ./cmd/bench                 # full scale: 1,000,000 operations
//	go run ./cmd/bench -quick          # 100,000 operations (BENCH=quick in make bench)
//	go run ./cmd/bench -database-url postgres://...   # an existing server instead of a private one
//
// Figures are ratios measured in the same run wherever the targets are ratios, so a loaded
// machine shifts both sides alike.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"syscall"
)

// receiverEnv, when set in the environment, makes this binary run the reference receiver
// instead of the benchmark (the benchmark starts itself again as its receiver process).
const receiverEnv = "TASKGATE_BENCH_RECEIVER"

func main() {
	if os.Getenv(receiverEnv) != "" {
		if err := runReceiverChild(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench receiver:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var o Options
	quick := fs.Bool("quick", getenv("BENCH") == "quick", "the smaller scale (100,000 operations; also BENCH=quick)")
	fs.StringVar(&o.DatabaseURL, "database-url", getenv("BENCH_DATABASE_URL"), "an existing PostgreSQL database to use (env BENCH_DATABASE_URL); empty = a private cluster")
	fs.StringVar(&o.KeepDatabase, "keep-database", "", "a database on -database-url's server to use and keep (created and seeded when missing, reused as it is), so one seeded ledger serves several runs")
	fs.StringVar(&o.Out, "out", "bench.json", "where to write the figures")
	fs.IntVar(&o.Operations, "operations", 0, "ledger size for the scale, console and watch phases (default 1,000,000; 100,000 quick)")
	fs.IntVar(&o.Clients, "clients", 0, "concurrent start clients of the start phase (default 4, the targets' figure)")
	fs.DurationVar(&o.Phase, "phase", 0, "length of each timed phase (default 10s; 5s quick)")
	fs.IntVar(&o.WatchTasks, "watch-tasks", 0, "tasks at which the watch searches take CPU and memory (their second step; default 1,000; 500 quick)")
	fs.IntVar(&o.WatchMax, "watch-max", 0, "last step of the watch searches (default 24,000; 1,700 quick)")
	fs.DurationVar(&o.WatchFor, "watch-for", 0, "how long each step of the watch searches is measured (default 12s; 4s quick)")
	fs.IntVar(&o.LongTasks, "long-tasks", 0, "Tasks watched at a 30s poll interval by one replica (default 100,000; 10,000 quick)")
	fs.StringVar(&o.LongMode, "long-mode", "", "how the long run reads the server: list (default) or get")
	fs.DurationVar(&o.LongPoll, "long-poll", 0, "poll interval of the long run (default 30s)")
	fs.DurationVar(&o.LongFor, "long-for", 0, "how long the long run is measured (default 65s; 32s quick)")
	fs.IntVar(&o.Toggles, "toggles", 0, "kill switch engage/release rounds (default 50)")
	fs.BoolVar(&o.PGStatements, "pg-statements", false, "log the statements PostgreSQL spent the most time on in each paired CPU window (pg_stat_statements)")
	fs.IntVar(&o.PairRounds, "pair-rounds", 2, "rounds of the paired CPU windows (WaitForTask and the watcher's modes alternating; 0 = none)")
	fs.IntVar(&o.PageRequests, "page-requests", 0, "requests per console page (default 40; 20 quick)")
	modes := fs.String("watch-modes", "list,notify", "modes the watch phase measures besides tasks/get (list, notify; empty = none)")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (the console side: start path, watcher, pages) to the file")
	memProfile := fs.String("memprofile", "", "write this process's allocation profile (since it started) to the file at the end")
	pages := fs.String("pages", "", "a regular expression: only the console pages whose names it matches (e.g. '^reconcile')")
	only := fs.String("only", "", "comma-separated phases to run (start, cap, killswitch, watch, waitfortask, watch30, scale, console); empty = all")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for p := range strings.SplitSeq(*only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Only = append(o.Only, p)
		}
	}
	if *pages != "" {
		re, err := regexp.Compile(*pages)
		if err != nil {
			return fmt.Errorf("-pages: %w", err)
		}
		o.Pages = re
	}
	o.Quick = *quick
	for m := range strings.SplitSeq(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.WatchModes = append(o.WatchModes, m)
		}
	}
	o = o.filled()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := Run(ctx, o, stdout)
	if err != nil {
		return err
	}
	if *memProfile != "" {
		if err := writeAllocs(*memProfile); err != nil {
			return err
		}
	}
	printTable(stdout, res)
	return writeJSON(o.Out, res)
}

// writeAllocs writes the allocation profile of this process to path.
func writeAllocs(path string) error {
	f, err := os.Create(filepath.Clean(path))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
