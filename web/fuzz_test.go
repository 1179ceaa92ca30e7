package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/taskgate/taskgate/operations"
)

// FuzzAPIBodies decodes arbitrary bytes as each API body (start, cancel, input answer): a
// refusal is a request error or too large, never anything else, and an accepted body
// encodes, decodes again and encodes to the same bytes.
func FuzzAPIBodies(f *testing.F) {
	for _, s := range []string{
		`{"workflow":"refund","tenant":"acme","object_ref":"refund A-1","arguments":{"amount":10}}`,
		`{"reason":"wrong customer"}`,
		`{"key":"q1","action":"accept","content":{"approve":true,"note":"ok"}}`,
		`{"workflow":"refund"} {"workflow":"again"}`,
		`{"workflow":"refund","unknown":1}`,
		`{"reason":"\u0000\u202e<script>"}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newBody := range []func() any{
			func() any { return &operations.StartRequest{} },
			func() any { return &cancelBody{} },
			func() any { return &inputBody{} },
		} {
			v := newBody()
			r := httptest.NewRequest(http.MethodPost, "/api/v1/operations", bytes.NewReader(b))
			r.Header.Set("Content-Type", "application/json")
			err := decodeJSON(httptest.NewRecorder(), r, v)
			if err != nil {
				if !errors.Is(err, operations.ErrInvalidRequest) && !errors.Is(err, errTooLarge) {
					t.Fatalf("refusal %v is neither a request error nor too large", err)
				}
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("an accepted body does not encode: %v", err)
			}
			w := newBody()
			r = httptest.NewRequest(http.MethodPost, "/api/v1/operations", bytes.NewReader(again))
			r.Header.Set("Content-Type", "application/json")
			if err := decodeJSON(httptest.NewRecorder(), r, w); err != nil {
				t.Fatalf("an accepted body, encoded again, is refused: %v (%s)", err, again)
			}
			// Encoding is a fixed point: the decoded body says the same the second time.
			if again2, _ := json.Marshal(w); !bytes.Equal(again, again2) {
				t.Fatalf("round trip changed the body: %s vs %s", again, again2)
			}
		}
	})
}
