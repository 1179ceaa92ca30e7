package operations

import (
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// An evidence handle always splits back into its server, era and task, whatever they hold.
func TestEvidenceHandleAlwaysSplits(t *testing.T) {
	t.Parallel()
	out := mcpclient.Outcome{Status: mcpclient.StatusCompleted, Era: mcpclient.EraLegacy, Result: &mcpclient.ToolResult{}}
	e := BuildEnvelope(out, "srv/a#b", "t/1?x=2#f", false, nil, time.Now())
	m := regexp.MustCompile(`^mcp:([^/#?]+)/([^/#?]+)/([^/#?]+)#sha256:[0-9a-f]{16}$`).FindStringSubmatch(e.EvidenceHandle)
	if m == nil {
		t.Fatalf("handle %q does not split", e.EvidenceHandle)
	}
	for i, want := range []string{"srv/a#b", "2025-11-25", "t/1?x=2#f"} {
		if got, err := url.PathUnescape(m[i+1]); err != nil || got != want {
			t.Errorf("part %d = %q (%v), want %q", i, got, err, want)
		}
	}
}
