package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/taskgate/taskgate/config"
)

// Verifier kinds (config.Verifier.Kind).
const (
	KindHTTP   = "http"
	KindJobAPI = "job_api"
	KindNone   = "none"
)

// Builtin is the base URL that stands for the in-process demo receiver.
const Builtin = "builtin:demo"

// Answer is one verifier answer.
type Answer struct {
	// Outcome is applied, not_applied or unknown.
	Outcome Outcome
	// Receipt is the system of record's receipt (empty when none).
	Receipt string
	// Detail says what was asked and what came back, for people.
	Detail string
	// HTTPStatus is the status of the lookup (0 when none was made).
	HTTPStatus int
}

// Subject is what a verifier asks about: an operation and, for the job API, its job.
type Subject struct {
	OperationID string
	Workflow    *config.Workflow
	// JobID and JobBase locate the incumbent job (job_api verifiers).
	JobID   string
	JobBase string
}

// Lookup asks the system of record about one operation.
type Lookup struct {
	// Client makes the requests.
	Client *http.Client
	// BuiltinURL is the in-process demo receiver's base URL ("" when none runs). A verifier
	// base_url of builtin:demo means BuiltinURL + "/records"; a job API of builtin:demo means
	// BuiltinURL.
	BuiltinURL string
	// Getenv resolves verifier credentials.
	Getenv func(string) string
}

// ErrNoVerifier: the workflow's verifier is none (manual only).
var ErrNoVerifier = errors.New("workflow has no outcome verifier")

// Verify asks once under the budget's timeout. An unreachable or malformed system of record
// answers unknown with the reason in Detail, never an error: unknown is not failed.
func (l Lookup) Verify(ctx context.Context, s Subject, b config.Budget) (Answer, error) {
	wf := s.Workflow
	timeout := b.Timeout.Duration
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch wf.Verifier.Kind {
	case KindHTTP:
		base := wf.Verifier.BaseURL
		if base == Builtin {
			if l.BuiltinURL == "" {
				return Answer{Outcome: OutcomeUnknown, Detail: "builtin:demo verifier but no demo receiver runs"}, nil
			}
			base = strings.TrimRight(l.BuiltinURL, "/") + "/records"
		}
		return l.record(ctx, strings.TrimRight(base, "/")+"/"+url.PathEscape(s.OperationID), wf.Verifier.Credential)
	case KindJobAPI:
		if s.JobID == "" {
			return Answer{Outcome: OutcomeUnknown, Detail: "no job id: the job submission was never acknowledged"}, nil
		}
		base := s.JobBase
		if base == "" || base == Builtin {
			if l.BuiltinURL == "" {
				return Answer{Outcome: OutcomeUnknown, Detail: "job API unknown"}, nil
			}
			base = l.BuiltinURL
		}
		return l.job(ctx, strings.TrimRight(base, "/")+"/jobs/"+url.PathEscape(s.JobID), wf.Fallback.Credential)
	default:
		return Answer{Outcome: OutcomeUnknown, Detail: "no verifier: manual only"}, ErrNoVerifier
	}
}

func (l Lookup) get(ctx context.Context, u string, cred *config.Secret, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	if cred != nil {
		getenv := l.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		tok, err := cred.Resolve(getenv)
		if err != nil {
			return 0, fmt.Errorf("verifier credential: %w", err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	c := l.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("malformed answer: %w", err)
	}
	return resp.StatusCode, nil
}

// record is GET {base}/{key}: {"status": "applied"|"not_applied", "receipt_id": …}; 404 and
// anything else is unknown.
func (l Lookup) record(ctx context.Context, u string, cred *config.Secret) (Answer, error) {
	var rec struct {
		Status    string `json:"status"`
		ReceiptID string `json:"receipt_id"`
		Receipt   string `json:"receipt"`
	}
	st, err := l.get(ctx, u, cred, &rec)
	a := Answer{Outcome: OutcomeUnknown, HTTPStatus: st}
	switch {
	case err != nil:
		a.Detail = "system of record unreachable or malformed: " + safe(err)
	case st == http.StatusNotFound:
		a.Detail = "system of record does not know the key (HTTP 404)"
	case st != http.StatusOK:
		a.Detail = fmt.Sprintf("system of record answered HTTP %d", st)
	case rec.Status == string(OutcomeApplied):
		a.Outcome, a.Receipt, a.Detail = OutcomeApplied, firstNonEmpty(rec.ReceiptID, rec.Receipt), "system of record: applied"
	case rec.Status == string(OutcomeNotApplied):
		a.Outcome, a.Detail = OutcomeNotApplied, "system of record: not applied"
	default:
		a.Detail = fmt.Sprintf("system of record answered status %q", truncate(rec.Status, 40))
	}
	return a, nil
}

// job is GET {job_api}/jobs/{id}: succeeded → applied with its receipt, failed → not_applied,
// anything else unknown.
func (l Lookup) job(ctx context.Context, u string, cred *config.Secret) (Answer, error) {
	var j struct {
		Status    string `json:"status"`
		ReceiptID string `json:"receipt_id"`
		Error     string `json:"error"`
	}
	st, err := l.get(ctx, u, cred, &j)
	a := Answer{Outcome: OutcomeUnknown, HTTPStatus: st}
	switch {
	case err != nil:
		a.Detail = "job API unreachable or malformed: " + safe(err)
	case st != http.StatusOK:
		a.Detail = fmt.Sprintf("job API answered HTTP %d", st)
	case j.Status == "succeeded":
		a.Outcome, a.Receipt, a.Detail = OutcomeApplied, j.ReceiptID, "job API: succeeded"
	case j.Status == "failed":
		a.Outcome, a.Detail = OutcomeNotApplied, "job API: failed ("+truncate(j.Error, 200)+")"
	default:
		a.Detail = "job API: job " + truncate(j.Status, 40)
	}
	return a, nil
}

func safe(err error) string { return truncate(err.Error(), 300) }

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
