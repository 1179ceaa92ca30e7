package killswitch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgtest"
)

// FuzzFlagDocument parses arbitrary bytes as a flagd flag document: a refusal is ErrInvalid;
// an accepted document encodes and parses again to the same flags, and every flag evaluates
// for a context to a result (a value or an error code) without a panic.
func FuzzFlagDocument(f *testing.F) {
	for _, s := range []string{
		`{"flags":{"new-task-starts":{"state":"ENABLED","variants":{"on":true,"off":false},"defaultVariant":"on"}}}`,
		`{"flags":{"f":{"state":"ENABLED","variants":{"a":"x","b":"y"},"defaultVariant":"a","targeting":{"if":[{"==":[{"var":"tenant"},"acme"]},"b","a"]}}}}`,
		`{"flags":{"f":{"state":"ENABLED","variants":{"a":1,"b":2},"defaultVariant":"a","targeting":{"fractional":[["a",50],["b",50]]}}}}`,
		`{"flags":{"f":{"state":"ENABLED","variants":{"a":1},"targeting":{"$ref":"e"}}},"$evaluators":{"e":{"in":["acme",{"var":"tenant"}]}}}`,
		`{"flags":{"f":{"state":"DISABLED","variants":{"a":{"nested":[1,2]}},"defaultVariant":"a","metadata":{"owner":"ops"}}}}`,
		`{"flags":{"f":{"state":"ENABLED","variants":{"a":"1.2.3"},"defaultVariant":"a","targeting":{"sem_ver":[{"var":"v"},">=","1.0.0"]}}}}`,
		`{"flags":{}}`, `{"flags":null}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	registerOperators()
	evalCtx := map[string]any{"targetingKey": "acme", "tenant": "acme", "workflow": "refund", "v": "1.4.0"}
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := ParseDocument(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal %v is not ErrInvalid", err)
			}
			return
		}
		enc, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("an accepted document does not encode: %v", err)
		}
		again, err := ParseDocument(enc)
		if err != nil {
			t.Fatalf("an accepted document, encoded again, is refused: %v (%s)", err, enc)
		}
		if enc2, _ := json.Marshal(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the document: %s vs %s", enc, enc2)
		}
		for key, fl := range doc.Flags {
			ctx := map[string]any{}
			for k, v := range evalCtx {
				ctx[k] = v
			}
			res := compile(key, fl, doc.Evaluators).evaluate(ctx, time.Unix(0, 0))
			if res.Key != key || (res.ErrorCode == "" && res.Reason == "") {
				t.Fatalf("flag %s evaluated to %+v", key, res)
			}
		}
	})
}

// FuzzOFREPRequest posts arbitrary bodies to the OFREP endpoint with a valid credential: every
// answer is one of the documented statuses, and every body it sends is JSON.
func FuzzOFREPRequest(f *testing.F) {
	for _, s := range []string{
		`{"context":{"targetingKey":"acme","workflow":"refund"}}`,
		`{"context":{"targetingKey":"globex"}}`,
		`{"context":{}}`, `{"context":null}`, `{}`, `[]`, `{"context":{"targetingKey":7}}`,
		`{"context":{"targetingKey":"acme","tenant":"globex","nested":{"a":[1,2,{"b":null}]}}}`,
	} {
		f.Add("new-task-starts", []byte(s))
		f.Add("", []byte(s))
	}
	f.Add("../../etc", []byte(`{"context":{"targetingKey":"acme"}}`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.New(f)
	svc, err := Open(ctx, pool, Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(svc.Close)
	as := auth.NewStore(pool, auth.Options{})
	admin := audit.Actor{Name: "admin@example.com", Kind: audit.KindAccount, Role: "admin"}
	_, secret, err := as.CreateToken(ctx, admin, auth.AllTenants, "billing-app", auth.TenantScope("acme"))
	if err != nil {
		f.Fatal(err)
	}
	h := OFREP(svc, TokenAuth(as))
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		path := "/ofrep/v1/evaluate/flags"
		if key != "" {
			path += "/" + key
		}
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1"+path, bytes.NewReader(body))
		if err != nil {
			return // not a URL a client can send
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusNotModified, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		default:
			t.Fatalf("status %d for %q %q: %s", rec.Code, key, body, rec.Body.Bytes())
		}
		if rec.Body.Len() > 0 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("the answer is not JSON: %q", rec.Body.Bytes())
		}
	})
}
