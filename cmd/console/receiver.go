package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/taskgate/taskgate/receiver"
)

// runReceiver implements "console receiver --addr 127.0.0.1:PORT".
func runReceiver(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("receiver", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address (loopback unless you mean it)")
	eras := fs.String("eras", "both", "eras served: both, legacy (2025-11-25) or extension (2026-07-28)")
	tokens := fs.String("tokens", "", "comma-separated TOKEN=TENANT:ACTOR bindings; empty = unauthenticated single-user mode")
	pollInterval := fs.Duration("poll-interval", 0, "poll interval suggested to requestors (default 500ms); load tests set e.g. 1s or 30s")
	maxTasks := fs.Int("max-tasks-per-tenant", 0, "non-terminal tasks allowed per tenant (default 64; negative = unlimited)")
	profile := fs.String("profile", "", "extra tools: \"\" (none) or conformance (the MCP conformance suites' fixture tools)")
	hosts := fs.String("allowed-hosts", "", "comma-separated host names a request's Host and Origin may name (default: localhost, 127.0.0.1, ::1)")
	hostileModes := fs.String("hostile", "", "comma-separated hostile modes (or all): transitions, taskid, huge, deep, markup, nul, malformed, trickle, tools")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console receiver [--addr 127.0.0.1:PORT] [--eras both|legacy|extension] [--tokens T=TENANT:ACTOR,...] [--profile conformance] [--allowed-hosts H,...] [--hostile MODE,...|all]")
		fmt.Fprintln(stdout, "Runs the reference MCP Task receiver: MCP at /mcp, the fake system of record at")
		fmt.Fprintln(stdout, "/records/{key} and the fake job API at /jobs.")
		fs.PrintDefaults()
	}
	if _, help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	cfg := receiver.Config{Tokens: map[string]receiver.Identity{}}
	switch *eras {
	case "both":
		cfg.Eras = receiver.ErasBoth
	case "legacy":
		cfg.Eras = receiver.ErasLegacy
	case "extension":
		cfg.Eras = receiver.ErasExtension
	default:
		return fmt.Errorf("receiver: --eras %q: want both, legacy or extension", *eras)
	}
	switch *profile {
	case "", receiver.ProfileConformance:
		cfg.Profile = *profile
	default:
		return fmt.Errorf("receiver: --profile %q: want conformance or nothing", *profile)
	}
	hm, err := receiver.ParseHostile(*hostileModes)
	if err != nil {
		return fmt.Errorf("receiver: --hostile: %w", err)
	}
	cfg.Hostile = hm
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			if strings.ContainsAny(h, ":/ ") && !strings.Contains(h, "::") {
				return fmt.Errorf("receiver: --allowed-hosts entry %q: want a host name without scheme or port", h)
			}
			cfg.AllowedHosts = append(cfg.AllowedHosts, h)
		}
	}
	for _, b := range strings.Split(*tokens, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		tok, who, ok := strings.Cut(b, "=")
		tenant, actor, ok2 := strings.Cut(who, ":")
		if !ok || !ok2 || tok == "" || tenant == "" || actor == "" {
			return fmt.Errorf("receiver: --tokens entry must be TOKEN=TENANT:ACTOR")
		}
		cfg.Tokens[tok] = receiver.Identity{Tenant: tenant, Actor: actor}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("receiver: listen %s: %w", *addr, err)
	}
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	cfg.Logger = logger
	cfg.DefaultPollInterval, cfg.MaxConcurrentTasks = *pollInterval, *maxTasks
	if *pollInterval > 5*time.Second {
		cfg.MaxPollInterval = *pollInterval
	}
	r := receiver.New(cfg)
	defer r.Close()
	if len(hm) > 0 {
		fmt.Fprintf(stdout, "reference receiver: HOSTILE modes %v: its answers break the protocol on purpose\n", hm)
	}
	fmt.Fprintf(stdout, "reference receiver: MCP endpoint http://%s/mcp\n", ln.Addr())
	return r.Serve(ctx, ln)
}
