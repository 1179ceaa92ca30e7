package mcpclient

import (
	"errors"
	"strconv"
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

// A task id that would blur a path, query or fragment, or is too long, is refused; ordinary
// ids pass.
func TestTaskIDsAreValidated(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"task_0af3c9": true, "550e8400-e29b-41d4-a716-446655440000": true, "a:b+c=d@e~f.g": true,
		"../../admin/accounts?x=1#frag": false, "a b": false, "100%": false, `q"uote`: false, "<b>": false,
		"é": false, strings.Repeat("x", 257): false, "": false,
	} {
		raw := []byte(`{"taskId":` + strconv.Quote(id) + `,"status":"working"}`)
		_, err := decodeTask(raw, EraLegacy, Limits{})
		if ok != (err == nil) || (!ok && !errors.Is(err, ErrMalformed)) {
			t.Errorf("task id %.40q: %v", id, err)
		}
	}
}
