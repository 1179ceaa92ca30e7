package mcpclient_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// An era fake scripted by mode, served in-process over HTTP or by
// re-executing this test binary over stdio:
//
//	retry       server/discover: -32022 naming only 2026-07-28, then a
//	            2026-07-28-only result without the tasks extension; initialize
//	            refused; tools/list and a plain tools/call answered.
//	noversion   -32022 naming 2025-11-25; initialize without protocolVersion.
//	legacyonly  -32022 naming 2025-11-25; a normal 2025-11-25 initialize.
//	neither     -32022 naming only versions this client does not speak.
const (
	eraFakeEnv    = "MCPCLIENT_ERA_FAKE_MODE"
	eraFakeLogEnv = "MCPCLIENT_ERA_FAKE_LOG"
)

type eraFake struct {
	mode        string
	mu          sync.Mutex
	discovers   int
	methods     []string
	callHeaders http.Header // of the last tools/call (HTTP)
	callMeta    map[string]json.RawMessage
	idsPath     string // stdio: where the child writes the ids of the requests it received
}

// answer returns the JSON-RPC answer key ("result" or "error") and value.
func (f *eraFake) answer(method string) (string, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.methods = append(f.methods, method)
	refuse := func(supported ...string) (string, any) {
		return "error", map[string]any{"code": -32022, "message": "Unsupported protocol version",
			"data": map[string]any{"supported": supported, "requested": "2026-07-28"}}
	}
	switch method {
	case "server/discover":
		f.discovers++
		switch f.mode {
		case "retry":
			if f.discovers == 1 {
				return refuse("2026-07-28")
			}
			return "result", map[string]any{"resultType": "complete", "supportedVersions": []string{"2026-07-28"},
				"capabilities": map[string]any{"tools": map[string]any{}},
				"_meta":        map[string]any{"io.modelcontextprotocol/serverInfo": map[string]any{"name": "modern-only-fake", "version": "1"}}}
		case "neither":
			return refuse("2099-01-01")
		}
		return refuse("2025-11-25")
	case "initialize":
		switch f.mode {
		case "retry":
			return "error", map[string]any{"code": -32601, "message": "Method not found: initialize"}
		case "noversion":
			return "result", map[string]any{"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "f", "version": "1"}}
		}
		return "result", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "f", "version": "1"}}
	case "tools/list":
		prop := func(typ, header string) map[string]any {
			p := map[string]any{"type": typ}
			if header != "" {
				p["x-mcp-header"] = header
			}
			return p
		}
		tool := func(name string, props map[string]any) map[string]any {
			return map[string]any{"name": name, "inputSchema": map[string]any{"type": "object", "properties": props}}
		}
		return "result", map[string]any{"resultType": "complete", "tools": []any{
			tool("echo", map[string]any{}),
			tool("headers", map[string]any{"region": prop("string", "Region"), "priority": prop("integer", "Priority"),
				"verbose": prop("boolean", "Verbose"), "greeting": prop("string", "NonAscii"), "padded": prop("string", "Pad"),
				"unset": prop("string", "Unset"), "query": prop("string", "")}),
			tool("bad_number", map[string]any{"score": prop("number", "Score")}),
			tool("bad_duplicate", map[string]any{"a": prop("string", "Region"), "b": prop("string", "region")}),
			tool("bad_name", map[string]any{"a": prop("string", "My Region")}),
			tool("bad_empty", map[string]any{"a": map[string]any{"type": "string", "x-mcp-header": ""}}),
		}}
	case "tools/call":
		return "result", map[string]any{"resultType": "complete", "content": []any{map[string]any{"type": "text", "text": "echo ok"}}}
	}
	return "error", map[string]any{"code": -32601, "message": "Method not found"}
}

func (f *eraFake) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.methods...)
}

// ServeHTTP answers one POST; modern errors get their HTTP status.
func (f *eraFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(b, &m) != nil || m.Method == "" || len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if m.Method == "tools/call" {
		f.mu.Lock()
		f.callHeaders, f.callMeta = r.Header.Clone(), m.Params.Meta
		f.mu.Unlock()
	}
	key, v := f.answer(m.Method)
	status := http.StatusOK
	if e, isErr := v.(map[string]any); key == "error" && isErr {
		switch e["code"] {
		case -32022:
			status = http.StatusBadRequest
		case -32601:
			status = http.StatusNotFound
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, key: v})
}

// serveEraFakeIfAsked serves the fake on stdio and exits when the test
// binary was re-executed for it.
func serveEraFakeIfAsked() {
	mode, asked := os.LookupEnv(eraFakeEnv)
	if !asked {
		return
	}
	f := &eraFake{mode: mode}
	logf, err := os.OpenFile(os.Getenv(eraFakeLogEnv), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" {
			continue
		}
		_, _ = fmt.Fprintln(logf, m.Method)
		if len(m.ID) == 0 {
			continue
		}
		if idf, err := os.OpenFile(os.Getenv(eraFakeLogEnv)+".ids", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
			_, _ = fmt.Fprintln(idf, string(m.ID))
			_ = idf.Close()
		}
		key, v := f.answer(m.Method)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, key: v})
		_, _ = out.Write(append(b, '\n'))
		_ = out.Flush()
	}
	_ = logf.Close()
	os.Exit(0)
}

// dialEraFake dials the fake over "http" or "stdio" and returns the
// connection (closed at cleanup), the methods the fake received, and the
// dial error.
func dialEraFake(t *testing.T, via, mode string, era mcpclient.EraChoice) (mcpclient.Conn, func() []string, error) {
	t.Helper()
	conn, methods, _, err := dialEraFakeServer(t, via, mode, era)
	return conn, methods, err
}

func dialEraFakeServer(t *testing.T, via, mode string, era mcpclient.EraChoice) (mcpclient.Conn, func() []string, *eraFake, error) {
	t.Helper()
	opts := mcpclient.Options{Era: era}
	var methods func() []string
	f := &eraFake{mode: mode}
	if via == "http" {
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		opts.URL = srv.URL
		methods = f.sent
	} else {
		logPath := filepath.Join(t.TempDir(), "methods.log")
		opts.Command, opts.Args = os.Args[0], []string{"-test.run=^$"}
		opts.Env = []string{eraFakeEnv + "=" + mode, eraFakeLogEnv + "=" + logPath}
		f.idsPath = logPath + ".ids"
		methods = func() []string {
			b, _ := os.ReadFile(logPath)
			return strings.Fields(string(b))
		}
	}
	conn, err := mcpclient.Dial(ctxT(t, 20*time.Second), opts)
	if err == nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, methods, f, err
}

// TestCustomParamHeaders: x-mcp-header arguments are mirrored into
// Mcp-Param-* headers (Base64 where the value is not plain printable ASCII),
// and tools with an invalid x-mcp-header are dropped with the reason
// recorded, in both eras over HTTP.
func TestCustomParamHeaders(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string]mcpclient.Era{"retry": mcpclient.EraExtension, "legacyonly": mcpclient.EraLegacy} {
		t.Run(string(want), func(t *testing.T) {
			t.Parallel()
			conn, _, f, err := dialEraFakeServer(t, "http", mode, mcpclient.EraAuto)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if conn.Info().Era != want {
				t.Fatalf("era %s", conn.Info().Era)
			}
			var names []string
			for _, tl := range conn.Tools() {
				names = append(names, tl.Name)
			}
			if !slices.Equal(names, []string{"echo", "headers"}) {
				t.Errorf("tools %v, want the invalid ones dropped", names)
			}
			d, isDropper := conn.(mcpclient.ToolDropper)
			if !isDropper {
				t.Fatal("the connection does not report dropped tools")
			}
			reasons := map[string]string{}
			for _, x := range d.DroppedTools() {
				reasons[x.Name] = x.Reason
			}
			for name, frag := range map[string]string{"bad_number": "number", "bad_duplicate": "names both", "bad_name": "not a valid header name", "bad_empty": "empty"} {
				if !strings.Contains(reasons[name], frag) {
					t.Errorf("dropped %s: reason %q, want it to mention %q", name, reasons[name], frag)
				}
			}
			args := map[string]any{"region": "us-west1", "priority": 42, "verbose": false, "greeting": "Hello, 世界",
				"padded": " padded ", "unset": nil, "query": "SELECT 1"}
			if _, err := conn.CallTool(ctxT(t, 10*time.Second), "headers", args, mcpclient.CallOptions{}); err != nil {
				t.Fatalf("call: %v", err)
			}
			f.mu.Lock()
			h, meta := f.callHeaders, f.callMeta
			f.mu.Unlock()
			if want == mcpclient.EraExtension {
				var info struct{ Name, Version string }
				if err := json.Unmarshal(meta["io.modelcontextprotocol/clientInfo"], &info); err != nil || info.Name == "" || info.Version == "" {
					t.Errorf("_meta clientInfo %s (%v), want name and version", meta["io.modelcontextprotocol/clientInfo"], err)
				}
			}
			for name, v := range map[string]string{
				"Mcp-Param-Region": "us-west1", "Mcp-Param-Priority": "42", "Mcp-Param-Verbose": "false",
				"Mcp-Param-Nonascii": "=?base64?SGVsbG8sIOS4lueVjA==?=", "Mcp-Param-Pad": "=?base64?IHBhZGRlZCA=?=",
			} {
				if got := h.Get(name); got != v {
					t.Errorf("%s = %q, want %q", name, got, v)
				}
			}
			for _, absent := range []string{"Mcp-Param-Unset", "Mcp-Param-Query"} {
				if _, has := h[absent]; has {
					t.Errorf("%s sent for a null or unmarked argument", absent)
				}
			}
		})
	}
}

// TestEraRefusalNamingOnly2026IsRetried: a -32022 whose supported list
// names only 2026-07-28 is retried as 2026-07-28, never answered with
// initialize; the modern-only server without the tasks extension then serves
// plain calls, on both transports.
func TestEraRefusalNamingOnly2026IsRetried(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"http", "stdio"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			conn, methods, f, err := dialEraFakeServer(t, via, "retry", mcpclient.EraAuto)
			if err != nil {
				t.Fatalf("dial: %v (sent %v)", err, methods())
			}
			if info := conn.Info(); info.Era != mcpclient.EraExtension || info.Name != "modern-only-fake" || info.Capabilities.Extension {
				t.Fatalf("info %+v", info)
			}
			res, err := conn.CallTool(ctxT(t, 10*time.Second), "echo", nil, mcpclient.CallOptions{})
			if err != nil || len(res.Texts()) != 1 || res.Texts()[0] != "echo ok" {
				t.Fatalf("plain call: %+v %v", res, err)
			}
			got := methods()
			if n := strings.Count(strings.Join(got, " "), "server/discover"); n != 2 || slices.Contains(got, "initialize") {
				t.Errorf("methods sent %v, want server/discover twice and no initialize", got)
			}
			if via == "stdio" {
				// The retry goes out as soon as the refusal is read: with the refusal's id,
				// mcp-go's reader could forget the retry's waiter and the answer be lost.
				b, _ := os.ReadFile(f.idsPath)
				ids := strings.Fields(string(b))
				if len(ids) < 4 || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
					t.Errorf("request ids on the stdio transport %v, want each its own", ids)
				}
			}
		})
	}
}

// TestInitializeWithoutProtocolVersionIsAnError: an initialize result that
// names no protocolVersion is malformed, not version "".
func TestInitializeWithoutProtocolVersionIsAnError(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"http", "stdio"} {
		conn, _, err := dialEraFake(t, via, "noversion", mcpclient.EraAuto)
		if err == nil {
			t.Fatalf("%s: dialled (version %q), want an error", via, conn.Info().ProtocolVersion)
		}
		if !errorsIs(err, mcpclient.ErrMalformed) || !strings.Contains(err.Error(), "protocolVersion") {
			t.Errorf("%s: error %v, want malformed initialize naming protocolVersion", via, err)
		}
	}
}

// TestForcedExtensionReportsAVersionRefusal: --era extension against a
// server refusing 2026-07-28 reports the version refusal, typed.
func TestForcedExtensionReportsAVersionRefusal(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"http", "stdio"} {
		_, methods, err := dialEraFake(t, via, "legacyonly", mcpclient.EraChoiceExtension)
		var uv *mcpclient.UnsupportedVersionError
		if !asAny(err, &uv) || errorsIs(err, mcpclient.ErrExtensionUnsupported) || !slices.Equal(uv.Supported, []string{"2025-11-25"}) {
			t.Errorf("%s: error %v, want a typed version refusal naming 2025-11-25", via, err)
		}
		if slices.Contains(methods(), "initialize") {
			t.Errorf("%s: sent initialize with the era forced to extension", via)
		}
	}
	// In auto mode over HTTP, a refusal naming neither version is typed too,
	// before any initialize (stdio already was).
	_, methods, err := dialEraFake(t, "http", "neither", mcpclient.EraAuto)
	var uv *mcpclient.UnsupportedVersionError
	if !asAny(err, &uv) || slices.Contains(methods(), "initialize") {
		t.Errorf("http neither: error %v, methods %v", err, methods())
	}
}
