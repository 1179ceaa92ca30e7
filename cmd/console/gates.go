package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/gates"
)

// errGateFailed makes "console gates run" exit non-zero after printing a failed run.
var errGateFailed = errors.New("gate run failed")

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runGates implements "console gates run --server NAME|URL [--workflow W] [--suite S]...
// [--json]": it runs the gate suites against a server through the fault proxy, prints a
// table of cases (or the run as JSON), stores the run unless --store=false, and returns an
// error (exit status 1) when any case failed.
func runGates(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprintln(stdout, "usage: console gates run --server NAME|URL [--workflow W] [--suite S]... [--json]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		return fmt.Errorf("gates: want the subcommand run")
	}
	fs := flag.NewFlagSet("gates run", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	server := fs.String("server", "", "server to test: a policy server name or an http(s) URL")
	workflow := fs.String("workflow", "", "workflow whose gate target (calls, identities, verifier) to use")
	var suites, pins multiFlag
	fs.Var(&suites, "suite", "suite to run (repeatable; default all): "+suiteNames())
	fs.Var(&pins, "pin", "rollout pin NAME=VALUE bound into the verdict (repeatable)")
	asJSON := fs.Bool("json", false, "print the run as JSON")
	store := fs.Bool("store", true, "store the run in the database")
	token := fs.String("token", "", "bearer token for an ad-hoc URL (default: the policy's)")
	policyPath := fs.String("config", getenv("TASKGATE_CONFIG"), "policy file (env TASKGATE_CONFIG); empty = the embedded example policy")
	timeout := fs.Duration("case-timeout", 30*time.Second, "bound of one case")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console gates run --server NAME|URL [--workflow W] [--suite S]... [--json]")
		fmt.Fprintln(stdout, "Runs the gate suites against a server through the fault proxy and prints each case's")
		fmt.Fprintln(stdout, "verdict and reason. Exits non-zero when any case failed. Effectful tools run only against")
		fmt.Fprintln(stdout, "servers the policy marks gate_target.")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args[1:])
	if help || err != nil {
		return err
	}
	if len(pos) != 0 || (*server == "" && *workflow == "") {
		fs.Usage()
		return fmt.Errorf("gates run: want --server or --workflow")
	}
	var chosen []gates.Suite
	for _, s := range suites {
		su, err := gates.ParseSuite(s)
		if err != nil {
			return fmt.Errorf("gates run: %w", err)
		}
		chosen = append(chosen, su)
	}
	pinMap := map[string]string{}
	for _, p := range pins {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return fmt.Errorf("gates run: --pin %q: want NAME=VALUE", p)
		}
		pinMap[k] = v
	}
	var policy *config.Config
	if *workflow != "" || !strings.Contains(*server, "://") {
		if policy, err = loadPolicy(*policyPath); err != nil {
			return err
		}
	}
	var target gates.Target
	if *workflow != "" {
		target, err = gates.TargetFor(policy, *workflow, getenv, "")
		if err == nil && *server != "" {
			var st gates.Target
			if st, err = gates.ServerTarget(policy, *server, getenv, ""); err == nil {
				target.Name, target.URL, target.GateTarget, target.Era = st.Name, st.URL, st.GateTarget, st.Era
				if st.Token != "" {
					target.Token = st.Token
				}
			}
		}
	} else {
		target, err = gates.ServerTarget(policy, *server, getenv, "")
	}
	if err != nil {
		return fmt.Errorf("gates run: %w", err)
	}
	if *token != "" {
		target.Token = *token
	}
	if len(pinMap) > 0 || len(target.Pins) == 0 {
		target.Pins = pinMap // --pin replaces the rollout plan's pins
	}
	runner := &gates.Runner{Build: buildVersion(), CaseTimeout: *timeout}
	run := runner.Run(ctx, target, chosen)
	run.StartedBy = "cli"
	var diff []gates.DeviationChange
	if *store {
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		db, err := openDatabase(ctx, dbf, logger)
		if err != nil {
			return err
		}
		defer db.Close()
		if err := migrateUp(ctx, db.Pool, logger); err != nil {
			return err
		}
		if _, diff, err = gates.NewStore(db.Pool).Save(ctx, run); err != nil {
			return fmt.Errorf("store gate run: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			*gates.Run
			DeviationDiff []gates.DeviationChange `json:"deviation_diff,omitempty"`
		}{run, diff}); err != nil {
			return err
		}
	} else {
		printRun(stdout, run, diff)
	}
	if run.Verdict == gates.Fail {
		return fmt.Errorf("%w: %s", errGateFailed, failSummary(run))
	}
	return nil
}

func suiteNames() string {
	var n []string
	for _, s := range gates.Suites {
		n = append(n, string(s))
	}
	return strings.Join(n, ", ")
}

func failSummary(r *gates.Run) string {
	if r.Error != "" {
		return r.Error
	}
	_, f, _ := r.Counts()
	s := fmt.Sprintf("%d cases failed", f)
	if len(r.HardFailures) > 0 {
		s += ", hard gates: " + strings.Join(r.HardFailures, ", ")
	}
	return s
}

func printRun(out io.Writer, r *gates.Run, diff []gates.DeviationChange) {
	fmt.Fprintf(out, "gate run of %s", r.Server)
	if r.Workflow != "" {
		fmt.Fprintf(out, " for workflow %s", r.Workflow)
	}
	fmt.Fprintf(out, " (%s %s, era %s, build %s)\n\n", r.ServerName, r.ServerVersion, r.Era, r.Build)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tCASE\tVERDICT\tTIME\tREASON")
	for _, c := range r.Cases {
		v := string(c.Verdict)
		if c.HardFailure() {
			v += " (hard: " + c.Hard + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Suite, c.Name, v, c.Duration.Round(time.Millisecond), c.Reason)
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\ndeviations:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, n := range r.Deviations.Names() {
		d := r.Deviations[n]
		m := d.Matches
		if m == "" {
			m = "-"
		}
		mark := ""
		if d.Deviates {
			mark = "deviates"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n, d.Observed, m, mark)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "deviation fingerprint %s\n", r.DeviationFingerprint)
	for _, c := range diff {
		fmt.Fprintf(out, "  changed since the last run: %s: %s → %s (earlier verdicts voided)\n", c.Behaviour, c.Before, c.After)
	}
	p, f, i := r.Counts()
	fmt.Fprintf(out, "\nverdict %s: %d pass, %d fail, %d inconclusive", r.Verdict, p, f, i)
	if r.ID != 0 {
		fmt.Fprintf(out, " (stored as run %d)", r.ID)
	}
	fmt.Fprintln(out)
	if r.Error != "" {
		fmt.Fprintf(out, "error: %s\n", r.Error)
	}
}
