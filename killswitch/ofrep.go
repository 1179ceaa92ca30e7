package killswitch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/taskgate/taskgate/auth"
)

// ErrUnauthenticated is what an OFREPAuth answers for a missing or unknown credential.
var ErrUnauthenticated = errors.New("killswitch: unauthenticated")

// OFREPAuth authenticates an OFREP request's credential (a bearer token or X-API-Key) and
// returns whether a tenant is in its scope.
type OFREPAuth func(ctx context.Context, credential string) (allows func(tenant string) bool, err error)

// maxOFREPBody bounds an OFREP request body.
const maxOFREPBody = 64 << 10

// OFREP serves the OpenFeature Remote Evaluation Protocol from svc's cache:
// POST /ofrep/v1/evaluate/flags/{key} and the bulk POST /ofrep/v1/evaluate/flags (with ETag and
// If-None-Match). The context's targetingKey is the tenant, which must be in the credential's
// scope; "tenant" in the context is always the targeting key.
func OFREP(svc *Service, authn OFREPAuth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const prefix = "/ofrep/v1/evaluate/flags"
		path := r.URL.Path
		if !strings.HasPrefix(path, prefix) {
			ofrepError(w, http.StatusNotFound, "", "GENERAL", "not an OFREP path")
			return
		}
		rest := strings.TrimPrefix(path, prefix)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			ofrepError(w, http.StatusMethodNotAllowed, "", "GENERAL", "use POST")
			return
		}
		cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			cred = r.Header.Get("X-API-Key")
		}
		cred = strings.TrimSpace(cred)
		if cred == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		allows, err := authn(r.Context(), cred)
		if errors.Is(err, ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate", error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err != nil {
			ofrepError(w, http.StatusInternalServerError, "", "", "the credential could not be checked")
			return
		}
		var req struct {
			Context map[string]any `json:"context"`
		}
		body := http.MaxBytesReader(w, r.Body, maxOFREPBody)
		dec := json.NewDecoder(body)
		if err := dec.Decode(&req); err != nil || req.Context == nil {
			ofrepError(w, http.StatusBadRequest, keyOf(rest), "INVALID_CONTEXT", "the body must be a JSON object with a context object")
			return
		}
		tenant, _ := req.Context["targetingKey"].(string)
		if tenant == "" {
			ofrepError(w, http.StatusBadRequest, keyOf(rest), "TARGETING_KEY_MISSING", "the context needs a targetingKey: the tenant")
			return
		}
		if !allows(tenant) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		req.Context["tenant"] = tenant
		if rest == "" || rest == "/" {
			bulk(svc, w, r, req.Context)
			return
		}
		key := keyOf(rest)
		if !ValidKey(key) {
			ofrepError(w, http.StatusNotFound, "", ErrorFlagNotFound, "no such flag")
			return
		}
		res := svc.Evaluate(key, req.Context)
		switch res.ErrorCode {
		case "":
		case ErrorFlagNotFound:
			ofrepError(w, http.StatusNotFound, key, ErrorFlagNotFound, res.ErrorMessage)
			return
		case ErrorProviderNotReady:
			ofrepError(w, http.StatusInternalServerError, "", "", res.ErrorMessage)
			return
		default:
			ofrepError(w, http.StatusBadRequest, key, res.ErrorCode, res.ErrorMessage)
			return
		}
		writeJSON(w, http.StatusOK, success(res))
	})
}

func keyOf(rest string) string {
	k := strings.TrimPrefix(rest, "/")
	if !utf8.ValidString(k) || len(k) > 200 {
		return ""
	}
	return k
}

func success(r Result) map[string]any {
	out := map[string]any{"key": r.Key, "reason": r.Reason}
	if r.NoValue {
		// No variant: the caller's code default applies (OFREP's "code default": no value).
		return out
	}
	out["value"] = r.Value
	out["variant"] = r.Variant
	if len(r.Metadata) > 0 {
		out["metadata"] = r.Metadata
	}
	return out
}

func bulk(svc *Service, w http.ResponseWriter, r *http.Request, evalCtx map[string]any) {
	snap := svc.Snapshot()
	if snap == nil {
		ofrepError(w, http.StatusInternalServerError, "", "", "flags are not loaded")
		return
	}
	// The answer depends on the definitions and on the context: the ETag covers both.
	ctxJSON, _ := json.Marshal(evalCtx)
	sum := sha256.Sum256(append([]byte(snap.ETag), ctxJSON...))
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	for _, t := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if t = strings.TrimSpace(t); t == etag || t == "W/"+etag || t == "*" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	flags := []map[string]any{}
	for _, key := range snap.Keys() {
		res := svc.Evaluate(key, evalCtx)
		if res.ErrorCode != "" {
			flags = append(flags, map[string]any{"key": key, "errorCode": res.ErrorCode, "errorDetails": res.ErrorMessage})
			continue
		}
		flags = append(flags, success(res))
	}
	writeJSON(w, http.StatusOK, map[string]any{"flags": flags})
}

func ofrepError(w http.ResponseWriter, status int, key, code, details string) {
	body := map[string]any{"errorDetails": details}
	if code != "" {
		body["errorCode"] = code
	}
	if key != "" {
		body["key"] = key
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// TokenAuth authenticates OFREP requests with Taskgate's API tokens: the token's tenants are
// its scope.
func TokenAuth(store *auth.Store) OFREPAuth {
	return func(ctx context.Context, credential string) (func(string) bool, error) {
		p, err := store.Authenticate(ctx, credential)
		if errors.Is(err, auth.ErrBadToken) {
			return nil, ErrUnauthenticated
		}
		if err != nil {
			return nil, err
		}
		return p.Allows, nil
	}
}
