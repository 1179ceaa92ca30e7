package operations_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

func TestEnvelopePreviewKeepsNoInvisibleOrControlText(t *testing.T) {
	t.Parallel()
	// A hostile server's result text: a bidirectional override that reverses what a person
	// reads, zero-width characters, a line separator, an escape sequence and invalid UTF-8.
	text := "refund \u202edetacilpmoc\u202c ok\u200b\u2028\x1b[31m red \xff end\nline two\ttab"
	content, err := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	if err != nil {
		t.Fatal(err)
	}
	out := mcpclient.Outcome{Status: mcpclient.StatusCompleted, Era: mcpclient.EraLegacy, Result: &mcpclient.ToolResult{Content: content}}
	e := operations.BuildEnvelope(out, "billing", "t-1", false, nil, time.Now())
	for _, bad := range []string{"\u202e", "\u202c", "\u200b", "\u2028", "\x1b", "\xff"} {
		if strings.Contains(e.Preview, bad) {
			t.Errorf("preview keeps %q: %q", bad, e.Preview)
		}
	}
	if !strings.Contains(e.Preview, "line two\ttab") || !strings.HasPrefix(e.Preview, "refund ") {
		t.Errorf("preview lost honest text: %q", e.Preview)
	}
	// Bounded, whatever the server sent.
	long, _ := json.Marshal([]map[string]string{{"type": "text", "text": strings.Repeat("é", 10_000)}})
	out.Result = &mcpclient.ToolResult{Content: long}
	if e := operations.BuildEnvelope(out, "billing", "t-1", false, nil, time.Now()); len(e.Preview) > operations.PreviewMax+len("…") {
		t.Errorf("preview of %d bytes", len(e.Preview))
	}
}
