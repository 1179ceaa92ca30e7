package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/config"
	demotraffic "github.com/taskgate/taskgate/demo"
	"github.com/taskgate/taskgate/examples"
	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/migrations"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/reconcile"
	"github.com/taskgate/taskgate/rollout"
	"github.com/taskgate/taskgate/watch"
	"github.com/taskgate/taskgate/web"
)

// runServe implements "console serve": the console on embedded defaults unless told otherwise.
// routeInputsFor is how long the router keeps a workflow's stage and a server's manifest
// status in memory when no change notification arrived: the most a start's route decision lags
// a change that sends none.
const routeInputsFor = time.Second

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dbf := dbFlags{exclusive: true}
	dbf.register(fs, getenv)
	addr := fs.String("addr", envOr(getenv, "TASKGATE_ADDR", "127.0.0.1:8080"), "listen address (env TASKGATE_ADDR)")
	policyPath := fs.String("config", getenv("TASKGATE_CONFIG"), "policy file (env TASKGATE_CONFIG); empty = the embedded example policy")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	demoTraffic := fs.Bool("demo-traffic", false, "start a few demo operations a minute on the embedded demo receiver")
	recoveryGrace := fs.Duration("recovery-grace", time.Minute, "how long past its budget a call's answer may stay unrecorded before the recovery sweep settles it")
	metricsAddr := fs.String("metrics-addr", envOr(getenv, "TASKGATE_METRICS_ADDR", defaultMetricsAddr),
		"listen address of /metrics, apart from the console (env TASKGATE_METRICS_ADDR); \"off\" serves none")
	secureCookies := fs.Bool("secure-cookies", envBool(getenv, "TASKGATE_SECURE_COOKIES"),
		"mark cookies Secure, for a TLS-terminating proxy (env TASKGATE_SECURE_COOKIES); without it they are Secure when a trusted proxy sends X-Forwarded-Proto: https")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console serve [OPTIONS]")
		fmt.Fprintln(stdout, "Runs the console. With no DATABASE_URL it starts a private PostgreSQL cluster in")
		fmt.Fprintln(stdout, "DATA_DIR/pg; with no policy file it runs the embedded demo policy and its in-process")
		fmt.Fprintln(stdout, "reference receiver.")
		fmt.Fprintln(stdout, "Options:")
		fs.PrintDefaults()
	}
	if _, help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	logger, err := newLogger(stdout, *logFormat, *logLevel)
	if err != nil {
		return err
	}

	policy, err := loadPolicy(*policyPath)
	if err != nil {
		return err
	}
	// Listen before starting the database, so a taken port fails fast and leaves nothing running.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()

	db, err := openDatabase(ctx, dbf, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	if db.cluster != nil {
		db.cluster.Supervise(ctx) // the private server is started again if it dies
	}
	if err := migrateUp(ctx, db.Pool, logger); err != nil {
		return err
	}
	if _, err := config.NewStore(db.Pool).Record(ctx, policy); err != nil {
		return err
	}
	authStore := auth.NewStore(db.Pool, auth.Options{})
	if _, err := authStore.PurgeSessions(ctx); err != nil {
		return err
	}
	trusted, err := trustedProxyFromEnv(getenv)
	if err != nil {
		return err
	}
	// The embedded demo (no policy file, no DATABASE_URL) gets one account per role.
	var demo []demoAccount
	if *policyPath == "" && dbf.url == "" {
		if demo, err = ensureDemoAccounts(ctx, authStore); err != nil {
			return err
		}
	}

	// The built-in demo receiver runs in-process on a loopback port of its own.
	var demoURL string
	var demoKnobs *receiver.Knobs
	if usesDemo(policy) {
		rln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("demo receiver: %w", err)
		}
		rcv := receiver.New(receiver.Config{Logger: logger.With("component", "demo-receiver")})
		defer rcv.Close()
		demoKnobs = rcv.Knobs()
		rctx, stopReceiver := context.WithCancel(context.WithoutCancel(ctx))
		rdone := make(chan struct{})
		go func() {
			defer close(rdone)
			if err := rcv.Serve(rctx, rln); err != nil {
				logger.Error("demo receiver stopped", "err", err)
			}
		}()
		defer func() { stopReceiver(); <-rdone }()
		demoURL = "http://" + rln.Addr().String()
	}

	// Capability manifests: every server probed at start, then on its schedule and on demand;
	// the router decides routes from them.
	mstore := manifests.NewStore(db.Pool)
	mcpDemo := ""
	if demoURL != "" {
		mcpDemo = demoURL + "/mcp"
	}
	prober, err := manifests.NewProber(manifests.ProberConfig{Policy: policy, Store: mstore, DemoURL: mcpDemo,
		Getenv: getenv, Logger: logger.With("component", "manifest-prober")})
	if err != nil {
		return err
	}
	if err := prober.Start(ctx); err != nil {
		return err
	}
	defer prober.Stop()
	// Flags and the kill switch: cached in memory, kept current by LISTEN/NOTIFY.
	flags, err := killswitch.Open(ctx, db.Pool, killswitch.Config{Logger: logger.With("component", "flags")})
	if err != nil {
		return err
	}
	defer flags.Close()
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: policy, Manifests: mstore,
		Stages: rollout.NewStore(db.Pool, policy), KillSwitch: flags, Canary: flags, Logger: logger, CacheFor: routeInputsFor})
	if err != nil {
		return err
	}

	runner, err := migrations.NewRunner(db.Pool)
	if err != nil {
		return err
	}
	defer runner.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(flags.Collectors()...)

	// Operations: the ledger and start path, and this replica's durable Task watchers.
	opServers := operations.NewServers(operations.ServersConfig{Policy: policy, Getenv: getenv, BuiltinURL: demoURL,
		Logger: logger.With("component", "mcp")})
	defer opServers.Close()
	ops, err := operations.NewService(operations.Config{Store: operations.NewStore(db.Pool), Policy: policy, Servers: opServers,
		Logger: logger.With("component", "operations"),
		// Routes come from the rollout router: stage, kill switch and the probed manifest.
		Router: operations.RouterFunc(func(ctx context.Context, in operations.RouteInput) (operations.Decision, error) {
			r, err := router.Route(ctx, in.Request.Workflow, in.Request.Tenant)
			if err != nil {
				return operations.Decision{}, err
			}
			d := r.Decision
			return operations.Decision{Route: operations.Route(d.Route), ReasonCode: string(d.Reason), Reason: d.Sentence,
				DeclareExtension: d.DeclareExtension, Context: r.Context().JSON()}, nil
		})})
	if err != nil {
		return err
	}
	// The watchers' status reads per server and hour, for the Servers page's poll-load chart:
	// counted in memory and added to the database every 10 s, and once more after the
	// watcher stopped (defers run last-in first-out).
	pollLog, err := operations.NewPollLog(operations.PollLogConfig{Store: ops.Store(), Logger: logger})
	if err != nil {
		return err
	}
	if err := pollLog.Start(ctx); err != nil {
		return err
	}
	defer pollLog.Stop()
	watcher, err := watch.New(watch.Config{Store: ops.Store(), Servers: opServers, Policy: policy, Operations: ops,
		Registerer: reg, Logger: logger, PollLog: pollLog})
	if err != nil {
		return err
	}
	if err := watcher.Start(ctx); err != nil {
		return err
	}
	defer watcher.Stop()
	janitor, err := operations.NewJanitor(operations.JanitorConfig{Store: ops.Store(), Policy: policy, Logger: logger})
	if err != nil {
		return err
	}
	if err := janitor.Start(ctx); err != nil {
		return err
	}
	defer janitor.Stop()
	// The console's counts: dirty operations moved into the counters, the ledger counted first
	// when it predates them.
	compactor, err := operations.NewCompactor(operations.CompactorConfig{Store: ops.Store(), Logger: logger})
	if err != nil {
		return err
	}
	if err := compactor.Start(ctx); err != nil {
		return err
	}
	defer compactor.Stop()
	// Slots of a concurrency cap taken by starts that died before committing are given back.
	go ops.Store().RecountCapacity(ctx, 0, 0, logger)
	// Recovery: calls sent whose answer was never recorded become unknown with an item.
	recovery, err := operations.NewRecovery(operations.RecoveryConfig{Store: ops.Store(), Grace: *recoveryGrace, Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	if err := recovery.Start(ctx); err != nil {
		return err
	}
	defer recovery.Stop()
	if *demoTraffic {
		if demoKnobs == nil {
			return fmt.Errorf("--demo-traffic needs the embedded demo receiver (a policy server with url builtin:demo)")
		}
		traffic, err := demotraffic.New(demotraffic.Config{Ops: ops, Policy: policy, Knobs: demoKnobs, Logger: logger})
		if err != nil {
			return err
		}
		if err := traffic.Start(ctx); err != nil {
			return err
		}
		defer traffic.Stop()
	}
	// Reconciliation: outcome verifiers after every terminal task, sync and job answer, and
	// re-verification of open items with backoff before a person is asked.
	recStore := reconcile.NewStore(db.Pool, reconcile.Options{ResolutionReasons: policy.ResolutionReasons, Retrier: ops})
	reconciler, err := reconcile.New(reconcile.Config{Pool: db.Pool, Policy: policy,
		Lookup: reconcile.Lookup{BuiltinURL: demoURL, Getenv: getenv}, Logger: logger})
	if err != nil {
		return err
	}
	if err := reconciler.Start(ctx); err != nil {
		return err
	}
	defer reconciler.Stop()
	// Gates: runs queued after a change or by an operator, taken by one replica under a lease.
	gateStore := gates.NewStore(db.Pool)
	gateRecheck, err := envDuration(getenv, "TASKGATE_GATE_RECHECK", time.Minute)
	if err != nil {
		return err
	}
	gateQueue, err := gates.NewQueue(gates.QueueConfig{Store: gateStore, Runner: &gates.Runner{Build: buildVersion(), Logger: logger},
		Target: func(workflow, _ string) (gates.Target, error) {
			t, err := gates.TargetFor(policy, workflow, getenv, demoURL)
			if err == nil {
				if v, verr := mstore.Latest(ctx, t.Name); verr == nil {
					t.ManifestFingerprint = v.Fingerprint // bind to the manifest the prober recorded
				}
			}
			return t, err
		},
		// Workflows with a gate section are compared with their evidence every minute; a new
		// manifest or build queues a run.
		Bindings: func(ctx context.Context) ([]gates.Binding, error) {
			var out []gates.Binding
			for _, w := range policy.Workflows {
				if w.Gate == nil {
					continue
				}
				if v, err := mstore.Latest(ctx, w.Gate.Server); err == nil {
					out = append(out, gates.Binding{Workflow: w.Name, Server: w.Gate.Server, ManifestFingerprint: v.Fingerprint, Build: buildVersion(),
						Pins: w.Plan().Pins.Map()})
				}
			}
			return out, nil
		},
		RecheckEvery: gateRecheck, ReplicaID: watcher.ReplicaID(), Logger: logger.With("component", "gates")})
	if err != nil {
		return err
	}
	if err := gateQueue.Start(ctx); err != nil {
		return err
	}
	defer gateQueue.Stop()
	// The rollout controller: audited moves, and every 30s the pins and canary analysis of each
	// workflow, pausing a rollout by itself on a drift or a crossed threshold.
	rollouts, err := rollout.NewController(rollout.ControllerConfig{Policy: policy, Pool: db.Pool, Evidence: gateStore,
		Manifests: mstore, Kill: flags, Canary: flags, Build: buildVersion()})
	if err != nil {
		return err
	}
	rolloutCtx, stopRollouts := context.WithCancel(ctx)
	defer stopRollouts()
	go rollouts.Run(rolloutCtx, 30*time.Second, logger.With("component", "rollout").Error)
	// Shadow comparisons: a read-only workflow in shadow also runs as a Task (once per
	// operation, whichever replica claims it); the others compare projected decisions only.
	shadower, err := rollout.NewShadower(rollout.ShadowConfig{Policy: policy, Pool: db.Pool, Router: router, Conns: opServers,
		Replica: watcher.ReplicaID(), Logger: logger.With("component", "shadow")})
	if err != nil {
		return err
	}
	go shadower.Run(rolloutCtx, 10*time.Second)
	srv, err := web.NewServer(web.Deps{
		SecureCookies: *secureCookies,
		// TASKGATE_METRICS_TOKEN also serves /metrics on the console's address, to callers
		// presenting it as a bearer token.
		MetricsToken: strings.TrimSpace(getenv("TASKGATE_METRICS_TOKEN")),
		Logger:       logger,
		Registry:     reg,
		Version:      buildVersion(),
		Policy:       policy,
		Auth:         authStore,
		Audit:        audit.NewStore(db.Pool),
		TrustedProxy: trusted,
		Manifests:    mstore,
		Prober:       prober,
		Router:       router,
		Operations:   ops,
		Reconcile:    recStore,
		Gates:        gateStore,
		Flags:        flags,
		Rollouts:     rollouts,
		// A kill switch release waits for a second operator when the policy or this is set.
		KillSwitchFourEyes: policy.KillSwitch.ReleaseFourEyes || getenv("TASKGATE_KILL_RELEASE_FOUR_EYES") == "1",
		Ready: web.ReadinessFunc(func(ctx context.Context) error {
			if err := db.Pool.Ping(ctx); err != nil {
				return fmt.Errorf("database unreachable%s: %w", db.supervisionNote(), err)
			}
			if err := flags.Ready(); err != nil {
				return err
			}
			return runner.Current(ctx)
		}),
	})
	if err != nil {
		return err
	}
	httpSrv := newHTTPServer(srv, logger)
	httpSrv.RegisterOnShutdown(srv.CloseStreams)
	// Committed audited changes (from every replica) drive the pages' live updates.
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	audit.Listen(lctx, db.Pool, logger, func(c audit.Change) { router.Changed(c.Area); srv.Publish(c) })
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	metricsURL, stopMetrics, err := serveMetrics(*metricsAddr, *metricsAddr == defaultMetricsAddr, srv.MetricsHandler(), logger)
	if err != nil {
		return err
	}
	defer stopMetrics()

	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "\nTaskgate console ready at %s\n", url)
	if dbf.url == "" {
		fmt.Fprintf(stdout, "  database: private PostgreSQL cluster in %s\n", strings.TrimRight(dbf.dataDir, "/")+"/pg")
	}
	fmt.Fprintf(stdout, "  policy:   %s (%d workflows)\n", policy.Source, len(policy.Workflows))
	if demoURL != "" {
		fmt.Fprintf(stdout, "  demo MCP receiver: %s/mcp\n", demoURL)
	}
	if metricsURL != "" {
		fmt.Fprintf(stdout, "  metrics:  %s/metrics\n", metricsURL)
	}
	printDemoAccounts(stdout, demo)
	fmt.Fprintln(stdout, "  stop with Ctrl-C")

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown", "err", err)
	}
	return nil
}

// defaultMetricsAddr is where /metrics is served unless told otherwise: loopback only.
const defaultMetricsAddr = "127.0.0.1:9464"

// serveMetrics serves metrics on addr ("off": nowhere) and returns its URL and a stop function.
// When addr is the default and taken (another console on this host), metrics are skipped with
// a warning; an address asked for that cannot be had is an error.
func serveMetrics(addr string, isDefault bool, h http.Handler, logger *slog.Logger) (string, func(), error) {
	if addr == "" || addr == "off" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if isDefault {
			logger.Warn("metrics not served: the default metrics address is taken; set --metrics-addr", "addr", addr, "err", err)
			return "", func() {}, nil
		}
		return "", nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	// Profiles only on a loopback admin listener: they show code paths and timings.
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	srv := newHTTPServer(mux, logger)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// envBool reads a boolean setting: 1, true, yes or on.
// envDuration reads a duration from the environment (def when unset).
func envDuration(getenv func(string) string, key string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(getenv(key))
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 1m or 5s", key, v)
	}
	return d, nil
}

func envBool(getenv func(string) string, key string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv(key))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// newHTTPServer is the console's HTTP server: slow or oversized request headers and idle
// connections are cut off; request bodies are bounded in size and in read time by the
// console's handler. There is no overall read or write timeout: the live-update streams stay
// open.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// loadPolicy reads the policy file, or the embedded example when path is empty.
func loadPolicy(path string) (*config.Config, error) {
	if path == "" {
		c, err := config.Parse(examples.Policy)
		if err != nil {
			return nil, fmt.Errorf("embedded policy: %w", err)
		}
		c.Source = "embedded examples/taskgate.yaml"
		return c, nil
	}
	return config.Load(path)
}

func usesDemo(c *config.Config) bool {
	for _, s := range c.Servers {
		if s.URL == "builtin:demo" {
			return true
		}
	}
	return false
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
