package mcpclient_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// The reference receiver (package receiver) as a peer of this client, over
// Streamable HTTP (httptest on 127.0.0.1) and over stdio (this test binary
// re-executed as a subprocess, see serveReceiverStdioIfAsked).

const (
	// stdioReceiverEnv makes the re-executed test binary serve the reference
	// receiver on stdin/stdout in the named mode (both, legacy, extension).
	stdioReceiverEnv = "MCPCLIENT_STDIO_RECEIVER"
	// stdioDiscoverEnv puts a shim in front of that receiver that answers
	// server/discover itself: "unsupported" (-32022 naming 2025-11-25 only)
	// or "silent" (never answers).
	stdioDiscoverEnv = "MCPCLIENT_STDIO_DISCOVER"
	// stdioFaultEnv sets a fault knob on the stdio receiver's work_optional
	// tool: "drop_before_create" (Fault.DropBeforeCreateResult).
	stdioFaultEnv = "MCPCLIENT_STDIO_FAULT"
	// stdioCountersEnv names a file the stdio receiver writes its Counters
	// to (JSON) when it stops, dropped connection included.
	stdioCountersEnv = "MCPCLIENT_STDIO_COUNTERS"
	// rigPoll is the poll interval the test receivers suggest.
	rigPoll = 100 * time.Millisecond
)

// Tokens of the HTTP rigs: two tenants.
var rigTokens = map[string]receiver.Identity{
	"tok-a": {Tenant: "tenant-a", Actor: "alice"},
	"tok-b": {Tenant: "tenant-b", Actor: "bob"},
}

func erasOf(mode string) receiver.Eras {
	switch mode {
	case "legacy":
		return receiver.ErasLegacy
	case "extension":
		return receiver.ErasExtension
	}
	return receiver.ErasBoth
}

// lockedWriter serialises writes of the stdio shim and the receiver.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serveReceiverStdioIfAsked serves the reference receiver on stdio and exits
// when the test binary was re-executed for that; otherwise it returns.
func serveReceiverStdioIfAsked() {
	mode := os.Getenv(stdioReceiverEnv)
	if mode == "" {
		return
	}
	r := receiver.New(receiver.Config{Eras: erasOf(mode), DefaultPollInterval: rigPoll, MaxTTL: 10 * time.Minute, DefaultTTL: 5 * time.Minute})
	if os.Getenv(stdioFaultEnv) == "drop_before_create" {
		r.Knobs().SetTool(receiver.ToolWorkOptional, receiver.Fault{DropBeforeCreateResult: true})
	}
	var in io.Reader = os.Stdin
	out := &lockedWriter{w: os.Stdout}
	if shim := os.Getenv(stdioDiscoverEnv); shim != "" {
		pr, pw := io.Pipe()
		in = pr
		go func() {
			sc := bufio.NewScanner(os.Stdin)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				_ = json.Unmarshal(sc.Bytes(), &m)
				if m.Method == "server/discover" {
					if shim == "unsupported" {
						b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{
							"code": -32022, "message": "Unsupported protocol version",
							"data": map[string]any{"supported": []string{"2025-11-25"}, "requested": "2026-07-28"}}})
						_, _ = out.Write(append(b, '\n'))
					}
					continue
				}
				_, _ = pw.Write(append(append([]byte(nil), sc.Bytes()...), '\n'))
			}
			_ = pw.Close()
		}()
	}
	err := r.ServeStdio(context.Background(), in, out)
	r.Close()
	if path := os.Getenv(stdioCountersEnv); path != "" {
		b, _ := json.Marshal(r.Counters())
		// Written whole under a temporary name, then renamed: a reader never
		// sees half a file.
		if werr := os.WriteFile(path+".tmp", b, 0o600); werr == nil {
			_ = os.Rename(path+".tmp", path)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stdioReceiver returns dial options that start the receiver in mode as a
// subprocess, with an optional discover shim.
func stdioReceiver(mode, shim string) mcpclient.Options {
	env := []string{stdioReceiverEnv + "=" + mode}
	if shim != "" {
		env = append(env, stdioDiscoverEnv+"="+shim)
	}
	return mcpclient.Options{Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: env}
}

// wireRecord is one HTTP request the receiver got.
type wireRecord struct {
	At     time.Time
	Header http.Header
	Method string
	Params map[string]any
}

// wireLog records the MCP POSTs in front of a receiver.
type wireLog struct {
	mu   sync.Mutex
	reqs []wireRecord
}

// wrap records each POST body (and its headers) before h serves it.
func (l *wireLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/mcp" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string         `json:"method"`
				Params map[string]any `json:"params"`
			}
			_ = json.Unmarshal(body, &m)
			if m.Method != "" {
				l.mu.Lock()
				l.reqs = append(l.reqs, wireRecord{At: time.Now(), Header: r.Header.Clone(), Method: m.Method, Params: m.Params})
				l.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
}

// of returns the recorded requests of one method, in arrival order.
func (l *wireLog) of(method string) []wireRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []wireRecord
	for _, r := range l.reqs {
		if r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// declares reports whether a recorded request declared the tasks extension
// in its _meta client capabilities.
func (w wireRecord) declares() bool {
	meta, _ := w.Params["_meta"].(map[string]any)
	caps, _ := meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[mcpclient.ExtensionName]
	return ok
}

// httpRig is a reference receiver on 127.0.0.1 behind a wire log.
type httpRig struct {
	rcv  *receiver.Receiver
	url  string // the MCP endpoint
	base string // the server root (records, jobs)
	wire *wireLog
}

// startReceiver serves a reference receiver over HTTP. mw, when given, sits
// between the wire log and the receiver.
func startReceiver(tb testing.TB, cfg receiver.Config, mw ...func(http.Handler) http.Handler) *httpRig {
	tb.Helper()
	if cfg.Tokens == nil {
		cfg.Tokens = rigTokens
	}
	if cfg.DefaultPollInterval == 0 {
		cfg.DefaultPollInterval = rigPoll
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = 10 * time.Minute
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = 5 * time.Minute
	}
	r := receiver.New(cfg)
	g := &httpRig{rcv: r, wire: &wireLog{}}
	h := r.Handler()
	for _, m := range mw {
		h = m(h)
	}
	ts := httptest.NewServer(g.wire.wrap(h))
	tb.Cleanup(func() {
		ts.Close()
		r.Close()
	})
	g.base, g.url = ts.URL, ts.URL+"/mcp"
	return g
}

// dial connects to the rig as tenant-a unless opts names a token.
func (g *httpRig) dial(tb testing.TB, opts mcpclient.Options) mcpclient.Conn {
	tb.Helper()
	opts.URL = g.url
	if opts.Token == "" {
		opts.Token = "tok-a"
	}
	conn, err := mcpclient.Dial(ctxT(tb, 20*time.Second), opts)
	if err != nil {
		tb.Fatalf("dial reference receiver: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// record asks the fake system of record over HTTP for the outcome of key.
func (g *httpRig) record(tb testing.TB, key string) receiver.Record {
	tb.Helper()
	resp, err := http.Get(g.base + "/records/" + key)
	if err != nil {
		tb.Fatalf("GET /records/%s: %v", key, err)
	}
	defer resp.Body.Close()
	var rec receiver.Record
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /records/%s: HTTP %d", key, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
		tb.Fatalf("decode record: %v", err)
	}
	return rec
}

// dialStdio starts a stdio receiver subprocess and dials it.
func dialStdio(tb testing.TB, opts mcpclient.Options, mode, shim string) mcpclient.Conn {
	tb.Helper()
	conn, err := dialStdioErr(tb, opts, mode, shim)
	if err != nil {
		tb.Fatalf("dial stdio receiver (%s): %v", mode, err)
	}
	return conn
}

func dialStdioErr(tb testing.TB, opts mcpclient.Options, mode, shim string) (mcpclient.Conn, error) {
	tb.Helper()
	base := stdioReceiver(mode, shim)
	opts.Command, opts.Args, opts.Env = base.Command, base.Args, base.Env
	conn, err := mcpclient.Dial(ctxT(tb, 20*time.Second), opts)
	if err == nil {
		tb.Cleanup(func() { _ = conn.Close() })
	}
	return conn, err
}

// eraChoice maps an era to the Dial choice that forces it.
func eraChoice(e mcpclient.Era) mcpclient.EraChoice {
	if e == mcpclient.EraLegacy {
		return mcpclient.EraChoiceLegacy
	}
	return mcpclient.EraChoiceExtension
}

// eraMode maps an era to the single-era receiver mode that serves it.
func eraMode(e mcpclient.Era) string {
	if e == mcpclient.EraLegacy {
		return "legacy"
	}
	return "extension"
}

// eventually waits until cond holds, re-checking on a short tick; it fails
// the test when ctx ends first.
func eventually(tb testing.TB, ctx context.Context, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			tb.Fatalf("never: %s", what)
		}
	}
}

// sameShape reports whether two errors read the same once each one's task
// id is replaced by a placeholder.
func sameShape(a error, aID string, b error, bID string) bool {
	return strings.ReplaceAll(a.Error(), aID, "ID") == strings.ReplaceAll(b.Error(), bID, "ID")
}
