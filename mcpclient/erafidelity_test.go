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
	mode      string
	mu        sync.Mutex
	discovers int
	methods   []string
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
		return "result", map[string]any{"resultType": "complete", "tools": []any{map[string]any{"name": "echo", "inputSchema": map[string]any{"type": "object"}}}}
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
	}
	if json.Unmarshal(b, &m) != nil || m.Method == "" || len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
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
	opts := mcpclient.Options{Era: era}
	var methods func() []string
	if via == "http" {
		f := &eraFake{mode: mode}
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		opts.URL = srv.URL
		methods = f.sent
	} else {
		logPath := filepath.Join(t.TempDir(), "methods.log")
		opts.Command, opts.Args = os.Args[0], []string{"-test.run=^$"}
		opts.Env = []string{eraFakeEnv + "=" + mode, eraFakeLogEnv + "=" + logPath}
		methods = func() []string {
			b, _ := os.ReadFile(logPath)
			return strings.Fields(string(b))
		}
	}
	conn, err := mcpclient.Dial(ctxT(t, 20*time.Second), opts)
	if err == nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, methods, err
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
			conn, methods, err := dialEraFake(t, via, "retry", mcpclient.EraAuto)
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
