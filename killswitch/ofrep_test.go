package killswitch

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgtest"
)

// ofrepClient is an OFREP client written from the protocol's OpenAPI document (service/
// openapi.yaml of open-feature/protocol): evaluationRequest {context}, serverEvaluationSuccess
// {key, value, reason, variant, metadata}, evaluationFailure {key, errorCode, errorDetails},
// bulkEvaluationSuccess {flags[], metadata}, ETag / If-None-Match and 304 on the bulk endpoint.
type ofrepClient struct {
	base, token string
	etag        string
	cached      bulkResponse
}

type evalResponse struct {
	Key          string         `json:"key"`
	Value        any            `json:"value"`
	Reason       string         `json:"reason"`
	Variant      string         `json:"variant"`
	Metadata     map[string]any `json:"metadata"`
	ErrorCode    string         `json:"errorCode"`
	ErrorDetails string         `json:"errorDetails"`
}

type bulkResponse struct {
	Flags []evalResponse `json:"flags"`
}

func (c *ofrepClient) post(t *testing.T, path string, evalCtx map[string]any, hdr map[string]string) *http.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"context": evalCtx})
	req, _ := http.NewRequest(http.MethodPost, c.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (c *ofrepClient) evaluate(t *testing.T, key string, evalCtx map[string]any) (int, evalResponse) {
	resp := c.post(t, "/ofrep/v1/evaluate/flags/"+key, evalCtx, nil)
	var out evalResponse
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// bulk evaluates every flag, reusing the cached answer on 304; it reports whether the answer
// changed.
func (c *ofrepClient) bulk(t *testing.T, evalCtx map[string]any) bool {
	hdr := map[string]string{}
	if c.etag != "" {
		hdr["If-None-Match"] = c.etag
	}
	resp := c.post(t, "/ofrep/v1/evaluate/flags", evalCtx, hdr)
	switch resp.StatusCode {
	case http.StatusNotModified:
		return false
	case http.StatusOK:
		c.etag = resp.Header.Get("ETag")
		c.cached = bulkResponse{}
		if err := json.NewDecoder(resp.Body).Decode(&c.cached); err != nil {
			t.Fatal(err)
		}
		return true
	}
	t.Fatalf("bulk: status %d", resp.StatusCode)
	return false
}

func (c *ofrepClient) flag(key string) (evalResponse, bool) {
	for _, f := range c.cached.Flags {
		if f.Key == key {
			return f, true
		}
	}
	return evalResponse{}, false
}

func TestOFREP(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := pgtest.New(t)
	svc := open(t, ctx, pool, Config{})
	as := auth.NewStore(pool, auth.Options{})
	admin := audit.Actor{Name: "admin@example.com", Kind: audit.KindAccount, Role: "admin"}
	_, secret, err := as.CreateToken(ctx, admin, auth.AllTenants, "billing-app", auth.TenantScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(OFREP(svc, TokenAuth(as)))
	t.Cleanup(ts.Close)
	c := &ofrepClient{base: ts.URL, token: secret}
	acme := map[string]any{"targetingKey": "acme", "workflow": "refund", "server": "billing"}

	status, r := c.evaluate(t, NewTaskStarts.Key, acme)
	if status != 200 || r.Value != true || r.Variant != "allowed" || r.Reason != ReasonStatic {
		t.Fatalf("single: %d %+v", status, r)
	}
	if !c.bulk(t, acme) {
		t.Fatal("first bulk call gave no answer")
	}
	if f, ok := c.flag(NewTaskStarts.Key); !ok || f.Value != true || c.etag == "" {
		t.Fatalf("bulk: %+v etag %q", c.cached, c.etag)
	}
	if c.bulk(t, acme) {
		t.Error("unchanged flags were sent again instead of 304")
	}
	if err := svc.Engage(ctx, ops, ScopeWorkflow, "refund", "incident"); err != nil {
		t.Fatal(err)
	}
	if !c.bulk(t, acme) {
		t.Fatal("the ETag did not change with the kill switch")
	}
	if f, _ := c.flag(NewTaskStarts.Key); f.Value != false || f.Variant != "kill-switch:workflow:refund" {
		t.Fatalf("after the switch: %+v", f)
	}

	if status, r = c.evaluate(t, "nope", acme); status != 404 || r.ErrorCode != "FLAG_NOT_FOUND" || r.Key != "nope" {
		t.Errorf("missing flag: %d %+v", status, r)
	}
	if status, r = c.evaluate(t, NewTaskStarts.Key, map[string]any{"workflow": "refund"}); status != 400 || r.ErrorCode != "TARGETING_KEY_MISSING" {
		t.Errorf("no targeting key: %d %+v", status, r)
	}
	if status, _ = c.evaluate(t, NewTaskStarts.Key, map[string]any{"targetingKey": "globex"}); status != 403 {
		t.Errorf("a tenant outside the token's scope: %d", status)
	}
	anon := &ofrepClient{base: ts.URL}
	if status, _ = anon.evaluate(t, NewTaskStarts.Key, acme); status != 401 {
		t.Errorf("no token: %d", status)
	}
	wrong := &ofrepClient{base: ts.URL, token: "tg_abcdefgh_nottherightsecret"}
	if status, _ = wrong.evaluate(t, NewTaskStarts.Key, acme); status != 401 {
		t.Errorf("bad token: %d", status)
	}
	// X-API-Key is the other credential the document allows.
	resp := anon.post(t, "/ofrep/v1/evaluate/flags/"+NewTaskStarts.Key, acme, map[string]string{"X-API-Key": secret})
	if resp.StatusCode != 200 {
		t.Errorf("X-API-Key: %d", resp.StatusCode)
	}
}
