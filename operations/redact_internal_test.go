package operations

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/mcpclient"
)

func TestAnswerQuotedBackByTheServerIsRedacted(t *testing.T) {
	t.Parallel()
	rpc := &mcpclient.RPCError{Code: -32602, Message: `card "4111111111111111" rejected for holder Jane Roe, pin 4321`}
	err := fmt.Errorf("answer input: %w", rpc)
	got := redactAnswer(err, map[string]any{"card": "4111111111111111", "holder": "Jane Roe", "pin": int64(4321), "ok": true})
	for _, v := range []string{"4111111111111111", "Jane Roe", "4321"} {
		if strings.Contains(got.Error(), v) || strings.Contains(safeMessage(got), v) {
			t.Errorf("error keeps %q: %s", v, got)
		}
	}
	var back *mcpclient.RPCError
	if !errors.As(got, &back) || !strings.Contains(got.Error(), "[redacted]") {
		t.Errorf("redacted error lost its kind or says nothing: %v", got)
	}
	if same := redactAnswer(err, map[string]any{"x": "absent"}); same != err { //nolint:errorlint // identity: the very same error must come back
		t.Errorf("an error without the values is changed: %v", same)
	}
}
