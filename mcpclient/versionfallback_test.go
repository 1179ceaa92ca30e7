package mcpclient_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// A small stdio fake, run by re-executing this test binary, that answers
// server/discover with -32022 naming the versions in fakeDiscoverEnv and
// serves initialize (2025-11-25) and tools/list. Every request method is
// appended to the file named by fakeLogEnv before it is answered, so a test
// can tell which requests the client sent.
const (
	fakeDiscoverEnv = "MCPCLIENT_FAKE_DISCOVER_SUPPORTED"
	fakeLogEnv      = "MCPCLIENT_FAKE_LOG"
)

// serveFakeDiscoverIfAsked serves the fake and exits when the test binary was
// re-executed for it; otherwise it returns.
func serveFakeDiscoverIfAsked() {
	list, asked := os.LookupEnv(fakeDiscoverEnv)
	if !asked {
		return
	}
	var supported []string
	if list != "" {
		supported = strings.Split(list, ",")
	}
	logf, err := os.OpenFile(os.Getenv(fakeLogEnv), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(id json.RawMessage, key string, v any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, key: v})
		_, _ = out.Write(append(b, '\n'))
		_ = out.Flush()
	}
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
			continue // a notification
		}
		switch m.Method {
		case "server/discover":
			reply(m.ID, "error", map[string]any{"code": -32022, "message": "Unsupported protocol version",
				"data": map[string]any{"supported": supported, "requested": "2026-07-28"}})
		case "initialize":
			reply(m.ID, "result", map[string]any{"protocolVersion": "2025-11-25",
				"capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo":   map[string]any{"name": "discover-fake", "version": "1"}})
		case "tools/list":
			reply(m.ID, "result", map[string]any{"tools": []any{}})
		default:
			reply(m.ID, "error", map[string]any{"code": -32601, "message": "Method not found"})
		}
	}
	_ = logf.Close()
	os.Exit(0)
}

// dialFakeDiscover starts the fake with the given supported versions and
// dials it; it returns the connection, a reader of the methods the fake
// received, and the dial error.
func dialFakeDiscover(t *testing.T, supported []string) (mcpclient.Conn, func() []string, error) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "methods.log")
	conn, err := mcpclient.Dial(ctxT(t, 20*time.Second), mcpclient.Options{
		Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{fakeDiscoverEnv + "=" + strings.Join(supported, ","), fakeLogEnv + "=" + logPath},
	})
	if err == nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	methods := func() []string {
		b, _ := os.ReadFile(logPath)
		return strings.Fields(string(b))
	}
	return conn, methods, err
}

// TestFindingTheEra_StdioUnsupportedVersionChoosesFromSupported: a stdio
// server/discover answered -32022 is a modern server refusing 2026-07-28;
// the client retries with what it can speak from error.data.supported.
func TestFindingTheEra_StdioUnsupportedVersionChoosesFromSupported(t *testing.T) {
	t.Parallel()
	t.Run("2025-11-25 supported initializes legacy and records why", func(t *testing.T) {
		t.Parallel()
		conn, methods, err := dialFakeDiscover(t, []string{"2099-01-01", "2025-11-25"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		info := conn.Info()
		ev := info.Evidence
		if info.Era != mcpclient.EraLegacy || info.ProtocolVersion != "2025-11-25" || info.Name != "discover-fake" {
			t.Fatalf("info %+v", info)
		}
		if ev.Method != "server/discover" || ev.ErrorCode != -32022 || !ev.ModernServer || ev.Era != mcpclient.EraLegacy ||
			!slices.Equal(ev.SupportedVersions, []string{"2099-01-01", "2025-11-25"}) ||
			!strings.Contains(ev.Answer, "initialize with 2025-11-25") {
			t.Errorf("evidence %+v", ev)
		}
		if got := methods(); len(got) < 2 || got[0] != "server/discover" || got[1] != "initialize" {
			t.Errorf("methods sent %v, want server/discover then initialize", got)
		}
	})
	t.Run("neither version supported is a typed unsupported-version error without initialize", func(t *testing.T) {
		t.Parallel()
		conn, methods, err := dialFakeDiscover(t, []string{"2099-01-01", "2024-11-05"})
		if err == nil {
			t.Fatalf("dialled in era %s (%+v), want an unsupported-version error", conn.Info().Era, conn.Info().Evidence)
		}
		var uv *mcpclient.UnsupportedVersionError
		if !asAny(err, &uv) || !errorsIs(err, mcpclient.ErrUnsupportedVersion) {
			t.Fatalf("error %v (%T), want *UnsupportedVersionError", err, err)
		}
		if !slices.Equal(uv.Supported, []string{"2099-01-01", "2024-11-05"}) || uv.RPC == nil || uv.RPC.Code != -32022 ||
			uv.RPC.Message != "Unsupported protocol version" {
			t.Errorf("unsupported-version error %+v (rpc %+v)", uv, uv.RPC)
		}
		if got := methods(); slices.Contains(got, "initialize") || !slices.Equal(got, []string{"server/discover"}) {
			t.Errorf("methods sent %v, want server/discover only", got)
		}
	})
}
