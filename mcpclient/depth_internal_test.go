package mcpclient

import (
	"errors"
	"strings"
	"testing"
)

// A result nested 9,000 levels deep is refused as malformed instead of kept and served on;
// ordinary nesting, and brackets inside strings, pass.
func TestToolResultDepthIsBounded(t *testing.T) {
	t.Parallel()
	deep := `{"content":[],"structuredContent":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`
	if _, err := decodeToolResult([]byte(deep), Limits{}); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "deeper than 64") {
		t.Errorf("9,000 levels: %v", err)
	}
	ok := `{"content":[{"type":"text","text":"` + strings.Repeat("[{", 500) + `"}],"structuredContent":` +
		strings.Repeat(`{"a":`, 60) + `1` + strings.Repeat("}", 60) + `}`
	if _, err := decodeToolResult([]byte(ok), Limits{}); err != nil {
		t.Errorf("62 levels with brackets in a string: %v", err)
	}
	if _, err := decodeToolResult([]byte(deep[:0]+`{"structuredContent":`+strings.Repeat("[", 11)+strings.Repeat("]", 11)+`}`), Limits{MaxDepth: 10}); !errors.Is(err, ErrMalformed) {
		t.Errorf("12 levels over a limit of 10: %v", err)
	}
}
