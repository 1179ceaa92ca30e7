// Command console is Taskgate: the operator console, the rollout controller and its tools.
//
//	console [serve]   run the console (the default)
//	console migrate   apply, roll back or list schema migrations
//	console receiver  run the reference MCP Task receiver
//	console probe     print what an MCP server offers
//	console call      run one tool call to the end
//	console route     print the route of a workflow for a tenant, and why
//	console gates     run the gate suites against a server
//	console users     manage console accounts
//	console tokens    manage API tokens for applications
//	console version   print the build
//
// main only wires: it calls run with the process's arguments, environment and stdout, under a
// context that ends on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

// version is set by the linker (-X main.version=…); otherwise the module build info is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}

const usage = `usage: console [COMMAND] [OPTIONS]

Taskgate: operator console and rollout controller for MCP Tasks.

Commands:
  serve      run the console (default when no command is given)
  migrate    schema migrations: up, down N, status
  receiver   run the reference MCP Task receiver standalone
  probe      print an MCP server's era, capabilities and tools as JSON
  call       run one tool call to the end, printing each status
  route      print the route a workflow's operation takes for a tenant now, and why
  gates      run the gate suites against a server: gates run --server NAME|URL
  users      console accounts: add, list, disable, enable, reset-password
  tokens     API tokens for applications: create, list, revoke
  flags      feature flags as a flagd JSON file: import FILE --reason WHY, export [FILE]
  kill       the kill switch: engage|release --workflow W|--server S|--all --reason WHY
  rollout    status|promote|pause|resume|rollback WORKFLOW --reason WHY
  version    print the build

Run "console COMMAND --help" for a command's options.

Environment:
  DATABASE_URL       PostgreSQL URL; when unset a private cluster runs in $TASKGATE_DATA_DIR/pg
  TASKGATE_ADDR      listen address (default 127.0.0.1:8080)
  TASKGATE_DATA_DIR  data directory (default ./.taskgate)
  TASKGATE_CONFIG    policy file (default: the embedded examples/taskgate.yaml)
  TASKGATE_TRUSTED_HEADER   header an authenticating proxy puts the user's email in (optional)
  TASKGATE_TRUSTED_PROXIES  addresses/prefixes that header is accepted from
`

// run is the whole program: main passes the process's arguments, environment and stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		cmd, args = "help", args[1:]
	} else if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, getenv, stdout)
	case "migrate":
		return runMigrate(ctx, args, getenv, stdout)
	case "receiver":
		return runReceiver(ctx, args, getenv, stdout)
	case "probe":
		return runProbe(ctx, args, stdout)
	case "call":
		return runCall(ctx, args, stdout)
	case "route":
		return runRoute(ctx, args, getenv, stdout)
	case "gates":
		return runGates(ctx, args, getenv, stdout)
	case "users":
		return runUsers(ctx, args, getenv, stdout)
	case "tokens":
		return runTokens(ctx, args, getenv, stdout)
	case "flags":
		return runFlags(ctx, args, getenv, stdout)
	case "kill":
		return runKill(ctx, args, getenv, stdout)
	case "rollout":
		return runRollout(ctx, args, getenv, stdout)
	case "version":
		fmt.Fprintln(stdout, "taskgate", buildVersion())
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stdout, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// parseFlags parses args (flags may follow positional arguments) and reports whether help was
// asked for, in which case the caller returns nil.
func parseFlags(fs *flag.FlagSet, args []string) (pos []string, help bool, err error) {
	pos, err = splitArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, true, nil
	}
	return pos, false, err
}

// envOr returns getenv(key), or def when it is empty.
func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
