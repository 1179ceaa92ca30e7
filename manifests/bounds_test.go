package manifests_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
)

// A server listing 20,000 tools (and one with an absurd name) keeps MaxTools of them, counts
// the rest as dropped, and its manifest stays small.
func TestManifestCapsTools(t *testing.T) {
	t.Parallel()
	var tools []mcpclient.Tool
	for i := 20000; i > 0; i-- { // listed out of order
		tools = append(tools, mcpclient.Tool{Name: fmt.Sprintf("tool-%05d", i)})
	}
	tools = append(tools, mcpclient.Tool{Name: strings.Repeat("x", 100000)})
	info := mcpclient.ServerInfo{Era: mcpclient.EraLegacy, ProtocolVersion: "2025-11-25", Name: "hostile", Version: "1"}
	m, err := manifests.FromInfo("hostile", info, tools, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tools) != manifests.MaxTools || m.DroppedTools != 20001-manifests.MaxTools {
		t.Fatalf("kept %d tools, dropped %d; want %d kept, %d dropped", len(m.Tools), m.DroppedTools,
			manifests.MaxTools, 20001-manifests.MaxTools)
	}
	if m.Tools[0].Name != "tool-00001" || m.Tools[len(m.Tools)-1].Name != fmt.Sprintf("tool-%05d", manifests.MaxTools) {
		t.Errorf("kept %s … %s, want the first by name", m.Tools[0].Name, m.Tools[len(m.Tools)-1].Name)
	}
	c, err := m.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if len(c) > 64<<10 || !strings.Contains(string(c), `"droppedTools":19501`) {
		t.Errorf("canonical form is %d bytes (dropped count present: %v)", len(c), strings.Contains(string(c), "droppedTools"))
	}
}
