package rollout

import (
	"fmt"
	"net/http"
	"time"
)

// Backpressure outcomes of CheckCapacity.
const (
	// CapacityAllowed: the decision stands.
	CapacityAllowed = "allowed"
	// CapacityFallback: the cap is reached and the policy says to take the fallback route.
	CapacityFallback = "fallback"
	// CapacityRetryLater: the cap is reached and the policy says to answer 429 with Retry-After.
	CapacityRetryLater = "429"
)

// Capacity is the verdict of CheckCapacity.
type Capacity struct {
	// Outcome is CapacityAllowed, CapacityFallback or CapacityRetryLater.
	Outcome string `json:"outcome"`
	// Decision is the decision to execute: the input decision when allowed, the policy's
	// fallback (reason at_capacity) on fallback, and a reject (reason at_capacity) on 429.
	Decision Decision `json:"decision"`
	// Status is the HTTP status to answer the start request with when nothing starts (429),
	// 0 otherwise.
	Status int `json:"status,omitempty"`
	// RetryAfter is the Retry-After to send with a 429.
	RetryAfter time.Duration `json:"retryAfterNs,omitempty"`
	// InFlight and Limit are what was compared.
	InFlight int `json:"inFlight"`
	Limit    int `json:"limit"`
}

// Allowed reports whether the operation may start on Decision's route.
func (c Capacity) Allowed() bool { return c.Outcome != CapacityRetryLater }

// RetryAfterSeconds is the Retry-After header value (whole seconds, at least 1).
func (c Capacity) RetryAfterSeconds() string {
	s := int((c.RetryAfter + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return fmt.Sprint(s)
}

// CheckCapacity applies the workflow's concurrency cap when an operation starts. inFlight is
// the number of the workflow's non-terminal tasks (counted by the caller, e.g. in the start
// transaction). Only the task route is capped; a cap of 0 means none. At the cap the policy's
// backpressure decides: "fallback" takes the fallback route (with the same invariants as
// Decide: never a plain call to a required tool, never a long sync call of a Task-required
// workflow), "429" answers 429 Too Many Requests with Retry-After (the workflow's retry_after).
//
// in is the Input the decision was made from; it lets the fallback check the tool's mode.
func CheckCapacity(in Input, d Decision, inFlight int) Capacity {
	w := in.Workflow
	c := Capacity{Outcome: CapacityAllowed, Decision: d, InFlight: inFlight, Limit: w.Concurrency}
	if d.Route != RouteTask || w.Concurrency <= 0 || inFlight < w.Concurrency {
		return c
	}
	why := fmt.Sprintf("the concurrency cap of %s is reached (%d of %d Tasks in flight)", w.Name, inFlight, w.Concurrency)
	if w.Backpressure == "fallback" {
		c.Outcome = CapacityFallback
		c.Decision = Decision{Era: d.Era, Fingerprint: d.Fingerprint}.withFallback(in, ReasonAtCapacity, why)
		return c
	}
	c.Outcome = CapacityRetryLater
	c.Status = http.StatusTooManyRequests
	c.RetryAfter = w.RetryAfter.Duration
	if c.RetryAfter <= 0 {
		c.RetryAfter = 30 * time.Second
	}
	c.Decision = Decision{Route: RouteReject, Reason: ReasonAtCapacity, Era: d.Era, Fingerprint: d.Fingerprint,
		Sentence: fmt.Sprintf("Not started: %s; retry after %s.", why, c.RetryAfter)}
	return c
}
