package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/taskgate/taskgate/killswitch"
)

// runFlags is "console flags import FILE|export [FILE]": flag definitions to and from a flagd
// JSON file, so a team can keep them in git.
func runFlags(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("flags", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	reason := fs.String("reason", "", "why (required for import)")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console flags import FILE --reason WHY | console flags export [FILE]")
		fmt.Fprintln(stdout, "Imports flag definitions from a flagd JSON file (flags and $evaluators it names are")
		fmt.Fprintln(stdout, "replaced, each change kept in the history), or exports the live definitions as one.")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	if len(pos) < 1 || (pos[0] == "import" && len(pos) != 2) || (pos[0] == "export" && len(pos) > 2) ||
		(pos[0] != "import" && pos[0] != "export") {
		fs.Usage()
		return fmt.Errorf("flags: want import FILE or export [FILE]")
	}
	var doc killswitch.Document
	if pos[0] == "import" {
		if *reason == "" {
			return fmt.Errorf("flags import: --reason is required")
		}
		raw, err := os.ReadFile(pos[1]) //nolint:gosec // the file the operator names on the command line
		if err != nil {
			return fmt.Errorf("flags import: %w", err)
		}
		if doc, err = killswitch.ParseDocument(raw); err != nil {
			return fmt.Errorf("flags import %s: %w", pos[1], err)
		}
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
	st := killswitch.NewStore(db.Pool)
	if pos[0] == "import" {
		n, err := st.Import(ctx, cliActor(getenv), doc, *reason)
		if err != nil {
			return fmt.Errorf("flags import: %w", err)
		}
		fmt.Fprintf(stdout, "imported %d flags and %d evaluators from %s\n", n, len(doc.Evaluators), pos[1])
		return nil
	}
	snap, err := st.Load(ctx)
	if err != nil {
		return err
	}
	out := stdout
	if len(pos) == 2 {
		f, err := os.Create(pos[1]) //nolint:gosec // the file the operator names on the command line
		if err != nil {
			return fmt.Errorf("flags export: %w", err)
		}
		defer f.Close()
		out = f
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(snap.Document())
}

// runKill is "console kill engage|release --workflow W|--server S|--all --reason WHY".
func runKill(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	workflow := fs.String("workflow", "", "the workflow's switch")
	server := fs.String("server", "", "the server's switch")
	all := fs.Bool("all", false, "the global switch")
	reason := fs.String("reason", "", "why (required)")
	approve := fs.Bool("approve", false, "release: approve a release someone else asked for")
	fourEyes := fs.Bool("four-eyes", getenv("TASKGATE_KILL_RELEASE_FOUR_EYES") == "1",
		"release: only ask; another person approves (env TASKGATE_KILL_RELEASE_FOUR_EYES=1; also when the policy sets kill_switch.release_four_eyes)")
	policyPath := fs.String("config", getenv("TASKGATE_CONFIG"), "policy file (env TASKGATE_CONFIG); empty = the embedded example policy")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console kill engage|release --workflow W|--server S|--all --reason WHY [--approve]")
		fmt.Fprintln(stdout, "Engaging refuses new Task starts on every replica (operations take their fallback or are")
		fmt.Fprintln(stdout, "refused, naming the switch); running Tasks keep draining. Every change is audited.")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help || err != nil {
		return err
	}
	n := 0
	scope, name := "", ""
	if *workflow != "" {
		n, scope, name = n+1, killswitch.ScopeWorkflow, *workflow
	}
	if *server != "" {
		n, scope, name = n+1, killswitch.ScopeServer, *server
	}
	if *all {
		n, scope, name = n+1, killswitch.ScopeGlobal, ""
	}
	if len(pos) != 1 || (pos[0] != "engage" && pos[0] != "release") || n != 1 {
		fs.Usage()
		return fmt.Errorf("kill: want engage or release and exactly one of --workflow, --server, --all")
	}
	if *reason == "" {
		return fmt.Errorf("kill %s: --reason is required", pos[0])
	}
	policy, err := loadPolicy(*policyPath)
	if err != nil {
		return err
	}
	if policy.KillSwitch.ReleaseFourEyes {
		*fourEyes = true
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
	st := killswitch.NewStore(db.Pool)
	by := cliActor(getenv)
	label := killswitch.SwitchVariant(scope, name)
	switch {
	case pos[0] == "engage":
		if err := st.Engage(ctx, by, scope, name, *reason); err != nil {
			return fmt.Errorf("kill engage: %w", err)
		}
		fmt.Fprintf(stdout, "%s engaged: new Task starts it covers are refused; running Tasks drain\n", label)
	case *approve:
		if err := st.Approve(ctx, by, scope, name, *reason); err != nil {
			return fmt.Errorf("kill release: %w", err)
		}
		fmt.Fprintf(stdout, "%s released after approval\n", label)
	default:
		pending, err := st.Release(ctx, by, scope, name, *reason, *fourEyes)
		if err != nil {
			return fmt.Errorf("kill release: %w", err)
		}
		if pending {
			fmt.Fprintf(stdout, "release of %s requested; someone else approves it with --approve\n", label)
		} else {
			fmt.Fprintf(stdout, "%s released: new Task starts resume\n", label)
		}
	}
	return nil
}
