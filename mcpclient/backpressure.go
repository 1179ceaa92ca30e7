package mcpclient

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrBackpressure: the server asked the client to wait (HTTP 429 Too Many Requests, or 503
// with Retry-After). An error that carries it is a *BackpressureError saying until when; it
// also wraps ErrTransportLost when a request got that answer (whether a server processed a
// refused request is not known, so a task creation stays unacknowledged and is never resent)
// or ErrNotDelivered when the Conn held a request back because the wait had not passed and
// the request's context ends before it does.
var ErrBackpressure = errors.New("server asked to retry later")

// DefaultMaxRetryAfter bounds the wait a server's Retry-After can impose on a Conn when
// Options.MaxRetryAfter is zero: a hostile or misconfigured server cannot stall the client for
// longer.
const DefaultMaxRetryAfter = 2 * time.Minute

// defaultRetryAfter is the wait after a 429 that names none.
const defaultRetryAfter = time.Second

// BackpressureError is a request refused by the server's backpressure, or held back by it.
type BackpressureError struct {
	// Status is the HTTP status of the server's answer (429 or 503); 0 when the Conn held the
	// request back without sending it.
	Status int
	// RetryAfter is the wait the server asked for (bounded by the Conn's MaxRetryAfter;
	// one second when a 429 names none).
	RetryAfter time.Duration
	// Until is when the Conn sends requests again.
	Until time.Time
}

// Error implements error.
func (e *BackpressureError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%v: request held back until %s (Retry-After)", ErrBackpressure, e.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%v: HTTP %d, Retry-After %s", ErrBackpressure, e.Status, e.RetryAfter)
}

// Unwrap returns ErrBackpressure and ErrTransportLost (answered) or ErrNotDelivered (held back).
func (e *BackpressureError) Unwrap() []error {
	if e.Status == 0 {
		return []error{ErrBackpressure, ErrNotDelivered}
	}
	return []error{ErrBackpressure, ErrTransportLost}
}

// RetryAt returns when the server's backpressure lets a request go again, if err carries it.
func RetryAt(err error) (time.Time, bool) {
	var bp *BackpressureError
	if errors.As(err, &bp) {
		return bp.Until, true
	}
	return time.Time{}, false
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date. ok is false for
// an empty or unreadable value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(24*time.Hour/time.Second) {
			n = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// backpressure is a Conn's RoundTripper that honours the server's Retry-After: after a 429
// (or a 503 naming a Retry-After) no JSON-RPC POST is sent before the wait has passed. A
// POST made sooner waits while its context allows, or fails at once as not delivered when
// its context would end first. GETs (event streams) and DELETEs (session ends) are not held.
type backpressure struct {
	base http.RoundTripper
	max  time.Duration

	mu    sync.Mutex
	until time.Time
}

// withBackpressure returns a copy of c whose transport honours Retry-After, with its own wait
// state (the connection pool is shared with c).
func withBackpressure(c *http.Client, maxWait time.Duration) *http.Client {
	cp := *c
	base := cp.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if maxWait <= 0 {
		maxWait = DefaultMaxRetryAfter
	}
	cp.Transport = &backpressure{base: base, max: maxWait}
	return &cp
}

// RoundTrip implements http.RoundTripper.
func (b *backpressure) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		if err := b.wait(req); err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, err
		}
	}
	resp, err := b.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ra := resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusTooManyRequests && (resp.StatusCode != http.StatusServiceUnavailable || ra == "") {
		return resp, nil
	}
	now := time.Now()
	d, ok := parseRetryAfter(ra, now)
	if !ok {
		if resp.StatusCode != http.StatusTooManyRequests {
			return resp, nil // an unreadable Retry-After on a 503: an ordinary server error
		}
		d = defaultRetryAfter
	}
	d = min(d, b.max)
	until := now.Add(d)
	b.mu.Lock()
	if until.After(b.until) {
		b.until = until
	}
	b.mu.Unlock()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return nil, &BackpressureError{Status: resp.StatusCode, RetryAfter: d, Until: until}
}

// wait holds a request until the Retry-After has passed, or refuses it when its context ends
// first.
func (b *backpressure) wait(req *http.Request) error {
	b.mu.Lock()
	until := b.until
	b.mu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	ctx := req.Context()
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		return &BackpressureError{RetryAfter: d, Until: until}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return &BackpressureError{RetryAfter: d, Until: until}
	}
}
