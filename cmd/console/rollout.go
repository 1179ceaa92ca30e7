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

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/rollout"
)

// runRollout is "console rollout status|promote|pause|resume|rollback WORKFLOW --reason WHY".
func runRollout(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	reason := fs.String("reason", "", "why (required for every move)")
	format := fs.String("format", "text", "status output: text or json")
	policyPath := fs.String("config", getenv("TASKGATE_CONFIG"), "policy file (env TASKGATE_CONFIG); empty = the embedded example policy")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console rollout status|promote|pause|resume|rollback WORKFLOW [--reason WHY] [--format text|json]")
		fmt.Fprintln(stdout, "Moves a workflow through off → shadow → the canary steps of its plan → full, one audited")
		fmt.Fprintln(stdout, "move at a time. Promotion is refused, naming why, without passing gate evidence for the")
		fmt.Fprintln(stdout, "current manifest, build and pins. Rollback engages the workflow's kill switch and goes to off.")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	verbs := map[string]bool{"status": true, "promote": true, "pause": true, "resume": true, "rollback": true}
	if len(pos) != 2 || !verbs[pos[0]] {
		fs.Usage()
		return errors.New("rollout: want status, promote, pause, resume or rollback and a WORKFLOW")
	}
	verb, workflow := pos[0], pos[1]
	if verb != "status" && strings.TrimSpace(*reason) == "" {
		return fmt.Errorf("rollout %s: --reason is required", verb)
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("rollout: --format %q: want text or json", *format)
	}
	policy, err := loadPolicy(*policyPath)
	if err != nil {
		return err
	}
	if _, ok := policy.Workflow(workflow); !ok {
		return fmt.Errorf("rollout %s: %w", workflow, rollout.ErrUnknownWorkflow)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := openDatabase(ctx, dbf, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrateUp(ctx, db.Pool, logger); err != nil {
		return err
	}
	c, err := rollout.NewController(rollout.ControllerConfig{Policy: policy, Pool: db.Pool, Evidence: gates.NewStore(db.Pool),
		Manifests: manifests.NewStore(db.Pool), Kill: killswitch.NewStore(db.Pool), Canary: killswitch.NewStore(db.Pool), Build: buildVersion()})
	if err != nil {
		return err
	}
	by := cliActor(getenv)
	var st rollout.Status
	switch verb {
	case "status":
		st, err = c.Status(ctx, workflow)
	case "promote":
		st, err = c.Promote(ctx, by, workflow, *reason)
	case "pause":
		st, err = c.Pause(ctx, by, workflow, *reason)
	case "resume":
		st, err = c.Resume(ctx, by, workflow, *reason)
	case "rollback":
		st, err = c.Rollback(ctx, by, workflow, *reason)
	}
	var ref *rollout.Refusal
	if errors.As(err, &ref) {
		fmt.Fprintf(stdout, "%s of %s refused:\n", verb, workflow)
		for _, r := range ref.Reasons {
			fmt.Fprintf(stdout, "  - %s\n", r)
		}
		return err
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printRollout(stdout, st)
	return nil
}

func printRollout(w io.Writer, st rollout.Status) {
	stage := string(st.Stage)
	if st.Stage == rollout.StageCanary {
		stage = fmt.Sprintf("canary step %d of %d (%d%%)", st.Step+1, len(st.Plan.Steps), st.Percent)
	}
	fmt.Fprintf(w, "%s: %s\n", st.Workflow, stage)
	if st.Paused != "" {
		fmt.Fprintf(w, "paused: %s\n", st.Paused)
	}
	if st.Next != "" {
		fmt.Fprintf(w, "next: %s %d%% (hold left %s)\n", st.Next, st.NextPercent, st.HoldLeft.Round(1e9))
	}
	fmt.Fprintf(w, "gate evidence: %s, passing %v\n", st.Evidence.State, st.Evidence.Passing)
	for _, r := range st.Evidence.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	for _, d := range st.Drift {
		fmt.Fprintf(w, "pin drift: %s\n", d)
	}
	for _, m := range st.History {
		fmt.Fprintf(w, "%s %s by %s: %s %d → %s %d (%d%%): %s\n", m.At.UTC().Format("2006-01-02 15:04:05"), m.Action, m.Actor,
			m.FromStage, m.FromStep, m.ToStage, m.ToStep, m.ToPercent, m.Reason)
	}
}
