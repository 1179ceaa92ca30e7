// Command soak runs Taskgate under crashes and outages and checks that nothing was lost, nothing
// ran twice and no answer went astray.
//
// It builds the console once and runs three `console serve` replicas on one private PostgreSQL
// server, with the reference receiver in a process of its own. Traffic starts operations on
// every route (task, sync, job API, handoff, reject) and both eras through the API of whichever
// replicas run, retrying the same idempotency key on another replica when one dies; a scripted
// person answers every question and some operations are cancelled. Meanwhile a random replica
// is killed with SIGKILL at random moments and started again, the receiver is restarted once
// (its tasks vanish) and PostgreSQL is stopped once. Afterwards it prints a table of the checks
// and one summary line:
//
//	soak: operations N crashes N receiver_restarts N outage_s N lost N repeated N duplicates N takeover_p99_ms N
//
// lost counts operations with neither a terminal task state nor a reconciliation item with a
// reason, plus answers accepted but never delivered; repeated counts idempotency keys that
// reached the receiver in more than one tools/call, plus answers delivered more than once;
// duplicates counts effects the system of record applied, or was asked to apply, a second
// time. It exits non-zero when any invariant fails.
//
//	go run ./cmd/soak -duration 10m      # make soak (SOAK=1m for a minute)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if addr := os.Getenv(receiverEnv); addr != "" {
		if err := runReceiverChild(addr, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "soak receiver:", err)
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
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// Options set a soak run.
type Options struct {
	// Duration is how long traffic and faults run (the drain and checks come after).
	Duration time.Duration
	// Outage is how long PostgreSQL is stopped (default 30s; a fifth of Duration when that
	// is shorter than 2.5 minutes).
	Outage time.Duration
	// Rate is operations started per second.
	Rate float64
	// Replicas is the number of console replicas (3).
	Replicas int
	// CrashEvery bounds the random wait between kills: from CrashEvery/2 to CrashEvery*3/2.
	CrashEvery time.Duration
	// Drain bounds the wait, after the traffic, for every operation to settle.
	Drain time.Duration
	// ExpiringTTL is the max_ttl of the workflows whose tasks never end.
	ExpiringTTL time.Duration
	// TaskTTL is the max_ttl of the refund workflows: a task still waiting then is expired
	// with an item (default 10m).
	TaskTTL time.Duration
	// RecoveryGrace is the consoles' --recovery-grace.
	RecoveryGrace time.Duration
	// Console is a built console binary; empty builds one.
	Console string
	// Seed seeds the random choices (0: from the clock).
	Seed uint64
	// Dir keeps the run's files (logs, data); empty uses a temporary directory removed after.
	Dir string
}

func (o Options) filled() Options {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	if o.Outage <= 0 {
		o.Outage = min(30*time.Second, o.Duration/5)
	}
	if o.Rate <= 0 {
		o.Rate = 5
	}
	if o.Replicas <= 0 {
		o.Replicas = 3
	}
	if o.CrashEvery <= 0 {
		o.CrashEvery = min(12*time.Second, max(4*time.Second, o.Duration/12))
	}
	if o.Drain <= 0 {
		o.Drain = 3 * time.Minute
	}
	if o.ExpiringTTL <= 0 {
		o.ExpiringTTL = 8 * time.Second
	}
	if o.TaskTTL <= 0 {
		o.TaskTTL = 10 * time.Minute
	}
	if o.RecoveryGrace <= 0 {
		o.RecoveryGrace = 10 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return o
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var o Options
	def := 10 * time.Minute
	if v := getenv("SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("SOAK=%q: want a duration such as 1m or 10m", v)
		}
		def = d
	}
	fs.DurationVar(&o.Duration, "duration", def, "how long traffic and faults run (env SOAK)")
	fs.DurationVar(&o.Outage, "outage", 0, "how long PostgreSQL is stopped (default 30s, or a fifth of a shorter run)")
	fs.Float64Var(&o.Rate, "rate", 5, "operations started per second")
	fs.IntVar(&o.Replicas, "replicas", 3, "console replicas")
	fs.DurationVar(&o.CrashEvery, "crash-every", 0, "mean time between kills (default duration/12, from 4s to 12s)")
	fs.DurationVar(&o.Drain, "drain", 3*time.Minute, "how long to wait after the traffic for every operation to settle")
	fs.StringVar(&o.Console, "console", "", "a built console binary (default: build one)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed (default: from the clock)")
	fs.StringVar(&o.Dir, "dir", "", "keep the run's logs and data here (default: a temporary directory, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Duration < 20*time.Second {
		return errors.New("-duration must be at least 20s: the faults need room")
	}
	if o.Replicas < 2 {
		return errors.New("-replicas must be at least 2: a crash needs a replica to take over")
	}
	res, err := Run(ctx, o.filled(), stdout)
	if res != nil {
		res.print(stdout)
	}
	if err != nil {
		return err
	}
	if f := res.failures(); len(f) > 0 {
		return fmt.Errorf("invariants failed: %v", f)
	}
	return nil
}
