package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/mcpclient"
)

// Builtin is the server URL of the reference receiver the console runs in-process.
const Builtin = "builtin:demo"

// ServersConfig configures a Servers registry.
type ServersConfig struct {
	// Policy lists the servers.
	Policy *config.Config
	// Getenv resolves token secrets (default: no secrets).
	Getenv func(string) string
	// BuiltinURL is the base URL (http://127.0.0.1:PORT) of the in-process receiver that
	// "builtin:demo" stands for; empty when none runs.
	BuiltinURL string
	// MaxConnsPerServer sizes each server's pooled HTTP client (default 256 idle connections).
	MaxConnsPerServer int
	// Logger receives connection logs (default: discard).
	Logger *slog.Logger
}

// Servers holds the MCP connections to the policy's servers: one pooled HTTP client per
// server, one shared connection per server for new calls, and, in the 2025-11-25 era, one
// connection per stored session so tasks stay observable from the session that created them.
type Servers struct {
	cfg      ServersConfig
	detector *mcpclient.Detector

	onStatus atomic.Pointer[func(server string, s mcpclient.Snapshot)]
	onInput  atomic.Pointer[func(server string, r mcpclient.InputRequest)]

	mu      sync.Mutex
	clients map[string]*http.Client
	conns   map[string]mcpclient.Conn // server, or server \x00 session
	// dialing serialises the dials of one key (a server, or a server's session), so that one
	// session is never opened or resumed twice; a slow dial holds up no other key, and a
	// connection already open is returned without waiting for any dial.
	dialing map[string]*sync.Mutex
}

// NewServers returns an empty registry; connections open on first use.
func NewServers(cfg ServersConfig) *Servers {
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Servers{cfg: cfg, detector: mcpclient.NewDetector(), clients: map[string]*http.Client{}, conns: map[string]mcpclient.Conn{},
		dialing: map[string]*sync.Mutex{}}
}

// Observe sets the callbacks for status notifications and input requests arriving on any
// connection (the watcher sets them). Either may be nil.
func (s *Servers) Observe(onStatus func(server string, snap mcpclient.Snapshot), onInput func(server string, r mcpclient.InputRequest)) {
	s.onStatus.Store(&onStatus)
	s.onInput.Store(&onInput)
}

// URL returns the MCP endpoint of a server.
func (s *Servers) URL(server string) (string, error) {
	srv, ok := s.cfg.Policy.Server(server)
	if !ok {
		return "", fmt.Errorf("server %q is not in the policy", server)
	}
	return s.resolve(srv.URL, "/mcp")
}

// JobAPIURL resolves a workflow's job API base URL ("builtin:demo" included).
func (s *Servers) JobAPIURL(base string) (string, error) { return s.resolve(base, "") }

func (s *Servers) resolve(u, suffix string) (string, error) {
	if u == Builtin {
		if s.cfg.BuiltinURL == "" {
			return "", fmt.Errorf("%s is not running", Builtin)
		}
		return strings.TrimRight(s.cfg.BuiltinURL, "/") + suffix, nil
	}
	if strings.HasPrefix(u, "stdio:") {
		return "", fmt.Errorf("stdio servers are not supported by the watchers")
	}
	return u, nil
}

// HTTPClient returns the pooled HTTP client of a server.
func (s *Servers) HTTPClient(server string) *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[server]
	if !ok {
		c = mcpclient.NewHTTPClient(s.cfg.MaxConnsPerServer)
		s.clients[server] = c
	}
	return c
}

func (s *Servers) options(server string) (mcpclient.Options, error) {
	srv, ok := s.cfg.Policy.Server(server)
	if !ok {
		return mcpclient.Options{}, fmt.Errorf("server %q is not in the policy", server)
	}
	u, err := s.URL(server)
	if err != nil {
		return mcpclient.Options{}, err
	}
	era, err := mcpclient.ParseEraChoice(srv.Era)
	if err != nil {
		return mcpclient.Options{}, err
	}
	token, err := srv.Token.Resolve(s.cfg.Getenv)
	if err != nil {
		return mcpclient.Options{}, fmt.Errorf("server %s: %w", server, err)
	}
	// Sessions outlive the connections: a task is bound to the 2025-11-25 session that created
	// it, so closing a connection (at a console restart, or after a lost dial race) must not
	// end the session; a restarted console resumes it (Options.Resume).
	return mcpclient.Options{
		URL: u, Token: token, Era: era, Detector: s.detector, HTTPClient: s.HTTPClient(server), KeepSessionOnClose: true,
		Logger: s.cfg.Logger.With("server", server),
		OnStatus: func(snap mcpclient.Snapshot) {
			if f := s.onStatus.Load(); f != nil && *f != nil {
				(*f)(server, snap)
			}
		},
		OnInput: func(r mcpclient.InputRequest) {
			if f := s.onInput.Load(); f != nil && *f != nil {
				(*f)(server, r)
			}
		},
	}, nil
}

// Connected reports whether the shared connection to a server is open (Conn returns it at
// once).
func (s *Servers) Connected(server string) bool {
	_, ok := s.lookup(server)
	return ok
}

// Open returns the connection able to observe a stored task if one is open already (it never
// dials): a watcher taking tasks in uses it to tell, before any read, whether their server
// lists them.
func (s *Servers) Open(server string, t *Task) (mcpclient.Conn, bool) {
	if t.Era == string(mcpclient.EraLegacy) && t.sessionID != "" {
		return s.lookup(server + "\x00" + t.sessionID)
	}
	return s.lookup(server)
}

// lookup returns the open connection under key.
func (s *Servers) lookup(key string) (mcpclient.Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.conns[key]
	return c, ok
}

// Conn returns the shared connection to a server, dialling it on first use.
func (s *Servers) Conn(ctx context.Context, server string) (mcpclient.Conn, error) {
	return s.connFor(server, func() (mcpclient.Conn, error) {
		opts, err := s.options(server)
		if err != nil {
			return nil, err
		}
		c, err := mcpclient.Dial(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", server, err)
		}
		return c, nil
	})
}

// TaskConn returns a connection able to observe a stored task: in the 2025-11-25 era the
// connection of the session that created it (resumed with Mcp-Session-Id after a restart),
// otherwise the shared connection.
func (s *Servers) TaskConn(ctx context.Context, server string, t *Task) (mcpclient.Conn, error) {
	if t.Era != string(mcpclient.EraLegacy) || t.sessionID == "" {
		return s.Conn(ctx, server)
	}
	return s.connFor(server+"\x00"+t.sessionID, func() (mcpclient.Conn, error) {
		opts, err := s.options(server)
		if err != nil {
			return nil, err
		}
		opts.Era = mcpclient.EraChoiceLegacy
		opts.Resume = &mcpclient.Resume{SessionID: t.sessionID, Capabilities: json.RawMessage(t.capabilities),
			ServerName: t.serverName, ServerVersion: t.serverVersion}
		c, err := mcpclient.Dial(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("resume session of %s: %w", server, err)
		}
		return c, nil
	})
}

// connFor returns the open connection of key, or dials it under key's own lock. A new shared
// connection is also kept under its session's key, for the tasks it creates.
func (s *Servers) connFor(key string, dial func() (mcpclient.Conn, error)) (mcpclient.Conn, error) {
	s.mu.Lock()
	c, ok := s.conns[key]
	lock := s.dialing[key]
	if lock == nil {
		lock = &sync.Mutex{}
		s.dialing[key] = lock
	}
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	lock.Lock()
	defer lock.Unlock()
	s.mu.Lock()
	c, ok = s.conns[key]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := dial()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.conns[key]; ok {
		_ = c.Close()
		return prev, nil
	}
	s.conns[key] = c
	if sid := c.Info().SessionID; sid != "" && !strings.Contains(key, "\x00") {
		s.conns[key+"\x00"+sid] = c
	}
	return c, nil
}

// Drop forgets a connection that failed for good (session gone, closed).
func (s *Servers) Drop(c mcpclient.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.conns {
		if v == c {
			delete(s.conns, k)
		}
	}
	_ = c.Close()
}

// Close closes every connection, leaving 2025-11-25 sessions alive at the servers so that a
// restarted console resumes them (Options.Resume) and keeps observing their tasks.
func (s *Servers) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[mcpclient.Conn]bool{}
	for k, c := range s.conns {
		if !seen[c] {
			seen[c] = true
			_ = c.Close()
		}
		delete(s.conns, k)
	}
}
