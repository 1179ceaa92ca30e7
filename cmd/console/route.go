package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/rollout"
)

// runRoute implements "console route WORKFLOW --tenant T [--format text|json] [--probe]": the
// route an operation of WORKFLOW for tenant T would take right now, with its reason code, the
// sentence for people and the inputs the decision was made from.
func runRoute(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	tenant := fs.String("tenant", "", "tenant the operation is for (required)")
	format := fs.String("format", "text", "output: text or json")
	policyPath := fs.String("config", getenv("TASKGATE_CONFIG"), "policy file (env TASKGATE_CONFIG); empty = the embedded example policy")
	probe := fs.Bool("probe", false, "probe the workflow's server on a new session first (not for builtin:demo)")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console route WORKFLOW --tenant T [--format text|json] [--probe]")
		fmt.Fprintln(stdout, "Prints the route (task, sync, job_api, handoff or reject) an operation of WORKFLOW for")
		fmt.Fprintln(stdout, "tenant T takes right now, its reason code, why, and the inputs: the latest manifest of")
		fmt.Fprintln(stdout, "the server, the rollout stage, the kill switch and the tenant's canary bucket.")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	if len(pos) != 1 || *tenant == "" {
		fs.Usage()
		return fmt.Errorf("route: want WORKFLOW and --tenant")
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("route: --format %q: want text or json", *format)
	}
	policy, err := loadPolicy(*policyPath)
	if err != nil {
		return err
	}
	w, ok := policy.Workflow(pos[0])
	if !ok {
		return fmt.Errorf("route %s: %w", pos[0], rollout.ErrUnknownWorkflow)
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
	mstore := manifests.NewStore(db.Pool)
	if *probe {
		p, err := manifests.NewProber(manifests.ProberConfig{Policy: policy, Store: mstore, Getenv: getenv, Logger: logger})
		if err != nil {
			return err
		}
		if _, err := p.ProbeNow(ctx, w.Server, manifests.Probe{Trigger: manifests.TriggerCLI, Actor: "console route"}); err != nil {
			fmt.Fprintf(stdout, "probe of %s failed: %v\n", w.Server, err)
		}
	}
	flags, err := killswitch.Open(ctx, db.Pool, killswitch.Config{Logger: logger})
	if err != nil {
		return err
	}
	defer flags.Close()
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: policy, Manifests: mstore,
		Stages: rollout.NewStore(db.Pool, policy), KillSwitch: flags, Canary: flags, Logger: logger})
	if err != nil {
		return err
	}
	r, err := router.Route(ctx, w.Name, *tenant)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printRouted(stdout, r)
	return nil
}

// printRouted writes a decision for people.
func printRouted(out io.Writer, r rollout.Routed) {
	d, in := r.Decision, r.Input
	fmt.Fprintf(out, "route     %s\n", d.Route)
	fmt.Fprintf(out, "reason    %s (%s)\n", d.Reason, rollout.Reasons[d.Reason])
	fmt.Fprintf(out, "why       %s\n", d.Sentence)
	if d.DeclareExtension {
		fmt.Fprintln(out, "extension declared on the call: "+mcpclient.ExtensionName)
	}
	if d.Shadow.Applies {
		fmt.Fprintf(out, "shadow    incumbent executes; compare as Task: %v\n", d.Shadow.CompareAsTask)
	}
	fmt.Fprintln(out, "inputs")
	fmt.Fprintf(out, "  workflow  %s (%s, task_use %s, fallback %s) on %s tool %s\n", r.Workflow, r.Effect, r.TaskUse, r.Fallback, r.Server, r.Tool)
	fmt.Fprintf(out, "  tenant    %s, canary bucket %d\n", r.Tenant, in.Bucket)
	stage := string(in.Stage)
	if in.Stage == rollout.StageCanary {
		stage += fmt.Sprintf(" %d%%", in.CanaryPercent)
	}
	if r.StageFromPolicy {
		stage += " (policy default)"
	}
	fmt.Fprintf(out, "  stage     %s\n", stage)
	if r.PromotionPausedReason != "" {
		fmt.Fprintf(out, "  promotion paused: %s\n", r.PromotionPausedReason)
	}
	ks := "released"
	switch {
	case in.KillSwitchUnknown:
		ks = "unreadable (treated as engaged): " + r.KillSwitchError
	case in.KillSwitch:
		ks = "engaged"
	}
	fmt.Fprintf(out, "  kill switch %s\n", ks)
	man := string(in.ManifestState)
	if r.ManifestID != 0 {
		man += fmt.Sprintf(", version %d, era %s, fingerprint %s", r.ManifestID, d.Era, manifests.Short(d.Fingerprint))
	}
	if !r.LastSuccess.IsZero() {
		man += ", last answered " + r.LastSuccess.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(out, "  manifest  %s\n", man)
	mode := r.ToolMode
	if mode == "" {
		mode = "not listed"
	}
	fmt.Fprintf(out, "  tool mode %s\n", manifests.ModeLabel(mode))
}

// probeSave holds "console probe URL --save" options.
type probeSave struct {
	save       bool
	server     string
	policyPath string
	db         dbFlags
}

// register adds the --save flags to the probe command. The process environment supplies the
// defaults (DATABASE_URL, TASKGATE_DATA_DIR, TASKGATE_CONFIG).
func (p *probeSave) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.save, "save", false, "store the manifest in the database as the next probe of the configured server")
	fs.StringVar(&p.server, "server", "", "with --save: configured server name (default: the server whose url is URL)")
	fs.StringVar(&p.policyPath, "config", os.Getenv("TASKGATE_CONFIG"), "with --save: policy file (env TASKGATE_CONFIG)")
	p.db.register(fs, os.Getenv)
}

// run stores what conn learnt as a manifest of the configured server, voiding gate verdicts and
// pausing promotion of its workflows when the fingerprint changed.
func (p *probeSave) run(ctx context.Context, url string, conn mcpclient.Conn, stdout io.Writer) error {
	if !p.save {
		return nil
	}
	policy, err := loadPolicy(p.policyPath)
	if err != nil {
		return err
	}
	name := p.server
	if name == "" {
		for _, s := range policy.Servers {
			if s.URL == url || strings.TrimSuffix(s.URL, "/") == strings.TrimSuffix(url, "/") {
				name = s.Name
			}
		}
		if name == "" {
			return fmt.Errorf("probe --save: %s is not the url of a configured server; name one with --server", url)
		}
	}
	if _, ok := policy.Server(name); !ok {
		return fmt.Errorf("probe --save: %q: %w", name, manifests.ErrUnknownServer)
	}
	m, err := manifests.FromInfo(name, conn.Info(), conn.Tools(), time.Now())
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := openDatabase(ctx, p.db, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrateUp(ctx, db.Pool, logger); err != nil {
		return err
	}
	rec, err := manifests.NewStore(db.Pool).Record(ctx, m, manifests.Probe{Trigger: manifests.TriggerCLI, Actor: "console probe"},
		manifests.Affected(policy, name))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "saved manifest version %d of %s, fingerprint %s\n", rec.Version.ID, name, rec.Version.Fingerprint)
	if rec.Changed {
		fmt.Fprintf(stdout, "changed from %s: %d gate verdicts voided, promotion paused for %s\n",
			manifests.Short(rec.PreviousFingerprint), rec.VoidedVerdicts, strings.Join(rec.PausedWorkflows, ", "))
	}
	return nil
}
