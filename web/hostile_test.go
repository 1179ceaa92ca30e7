package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
)

// A server listing 20,000 tools does not make the servers and manifests pages megabytes for
// every viewer: the manifest keeps manifests.MaxTools of them and the pages say how many more
// there were.
func TestHostileToolListStaysBounded(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	var tools []mcpclient.Tool
	for i := range 20000 {
		tools = append(tools, mcpclient.Tool{Name: fmt.Sprintf("tool_%05d_%s", i, strings.Repeat("x", 40)), TaskSupport: mcpclient.TaskOptional})
	}
	m, err := manifests.FromInfo("demo", mcpclient.ServerInfo{Era: mcpclient.EraLegacy, ProtocolVersion: "2025-11-25", Name: "hostile", Version: "1"},
		tools, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifests.NewStore(e.pool).Record(context.Background(), m, manifests.Probe{Trigger: manifests.TriggerCLI}, nil); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d more tools not kept", 20000-manifests.MaxTools)
	for _, path := range []string{"/servers", "/servers/demo/manifests"} {
		res, body := e.do(t, "viewer", http.MethodGet, path, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, res.StatusCode)
		}
		t.Logf("%s with 20,000 tools listed: %d KiB", path, len(body)>>10)
		if len(body) > 512<<10 {
			t.Errorf("%s is %d KiB with 20,000 tools listed", path, len(body)>>10)
		}
		if !strings.Contains(body, want) {
			t.Errorf("%s does not say %q", path, want)
		}
	}
}

// A server whose manifest changes at every probe does not make its history page grow without
// end: the versions come a page at a time, and any two can still be compared.
func TestManifestHistoryIsPaged(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	store := manifests.NewStore(e.pool)
	var ids []int64
	for i := range 25 {
		m := &manifests.Manifest{Server: "demo", Era: "2025-11-25", ProtocolVersion: "2025-11-25", ServerName: "r", ServerVersion: fmt.Sprint(i),
			Tools: []manifests.Tool{{Name: fmt.Sprintf("t%02d", i), Mode: manifests.ModeOptional}}}
		rec, err := store.Record(context.Background(), m, manifests.Probe{Trigger: manifests.TriggerCLI}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.Version.ID)
	}
	rows := func(body string) int { return strings.Count(body, `data-testid="version-`) }
	_, body := e.do(t, "viewer", http.MethodGet, "/servers/demo/manifests", nil)
	if rows(body) != manifestsPageSize || !strings.Contains(body, fmt.Sprintf(`data-testid="version-%d"`, ids[24])) {
		t.Fatalf("first page shows %d versions", rows(body))
	}
	older := fmt.Sprintf("/servers/demo/manifests?before=%d", ids[15])
	if !strings.Contains(body, `href="`+older+`"`) {
		t.Fatalf("first page has no link to older versions (%s)", older)
	}
	_, body = e.do(t, "viewer", http.MethodGet, older, nil)
	if rows(body) != manifestsPageSize || !strings.Contains(body, fmt.Sprintf(`data-testid="version-%d"`, ids[14])) ||
		strings.Contains(body, fmt.Sprintf(`data-testid="version-%d"`, ids[15])) {
		t.Errorf("second page shows %d versions", rows(body))
	}
	_, body = e.do(t, "viewer", http.MethodGet, fmt.Sprintf("/servers/demo/manifests?a=%d&b=%d", ids[0], ids[24]), nil)
	if !strings.Contains(body, "t00") || strings.Contains(body, `data-testid="diff-empty"`) {
		t.Error("versions on different pages cannot be compared")
	}
}
