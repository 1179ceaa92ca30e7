package faultproxy

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzOnMessage feeds arbitrary server messages to the proxy's reader: it must never panic
// except by a cut it was asked for (none here), and it delivers the bytes unchanged.
func FuzzOnMessage(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"t","status":"working"}}}`), "tools/call")
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"result":{"resultType":"task","taskId":"t","status":"input_required"}}`), "tools/call")
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"t","status":"completed"}}`), "")
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"x"}}`), "tasks/get")
	f.Add([]byte(`{"result":{"_meta":{"io.modelcontextprotocol/related-task":7}}}`), "tasks/result")
	f.Fuzz(func(t *testing.T, raw []byte, method string) {
		p, err := New("http://127.0.0.1:1/mcp")
		if err != nil {
			t.Fatal(err)
		}
		out := p.onMessage(raw, "response", "2025-11-25", method, 200)
		if !bytes.Equal(out, raw) {
			t.Fatalf("a message changed with no rewrite rule: %q → %q", raw, out)
		}
		if len(p.Messages()) > 1 {
			t.Fatalf("one message logged %d times", len(p.Messages()))
		}
		_, _, _ = taskOf(method, json.RawMessage(raw))
	})
}
