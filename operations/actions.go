package operations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskgate/taskgate/internal/safetext"
	"github.com/taskgate/taskgate/mcpclient"
)

// Get returns an operation with everything observed about it, if it is in scope. An operation
// of another tenant is reported as ErrNotFound, so ids reveal nothing.
func (s *Service) Get(ctx context.Context, scope Scope, id string) (Detail, error) {
	d, err := s.cfg.Store.Detail(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	if !scope.Allows(d.Tenant) {
		return Detail{}, fmt.Errorf("operation %s: %w", id, ErrNotFound)
	}
	return d, nil
}

// List returns a page of operations in scope.
func (s *Service) List(ctx context.Context, scope Scope, f Filter) (Page, error) {
	if f.Tenant != "" && !scope.Allows(f.Tenant) {
		return Page{Operations: []Operation{}}, nil
	}
	return s.cfg.Store.List(ctx, scope, f)
}

func (s *Service) running(ctx context.Context, scope Scope, id string) (Operation, error) {
	op, err := s.cfg.Store.Get(ctx, id)
	if err != nil {
		return op, err
	}
	if !scope.Allows(op.Tenant) {
		return op, fmt.Errorf("operation %s: %w", id, ErrNotFound)
	}
	if op.Task == nil || op.Task.TaskID == "" || !op.Task.State.Watchable() {
		return op, fmt.Errorf("operation %s: %w", id, ErrNotCancellable)
	}
	return op, nil
}

// Cancel asks the server to cancel the operation's task, only where the server advertises
// cancellation. The request (who, why) is recorded first; an acknowledgement is recorded only
// once observed; the domain outcome is untouched (it stays to be verified).
func (s *Service) Cancel(ctx context.Context, scope Scope, id, by, reason string) (Detail, error) {
	return s.CancelRecorded(ctx, scope, id, by, reason, nil)
}

// CancelRecorded is Cancel with rec writing the audit rows: the request in the transaction
// that records it, and the server's reply in the transaction that records the reply.
func (s *Service) CancelRecorded(ctx context.Context, scope Scope, id, by, reason string, rec Recorder) (Detail, error) {
	if err := safetext.Check("reason", reason); err != nil {
		return Detail{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	reason = safetext.CutPlain(reason, 500)
	op, err := s.running(ctx, scope, id)
	if err != nil {
		return Detail{}, err
	}
	wf, ok := s.cfg.Policy.Workflow(op.Workflow)
	if !ok {
		return Detail{}, fmt.Errorf("%w: %q", ErrUnknownWorkflow, op.Workflow)
	}
	conn, err := s.cfg.Servers.TaskConn(ctx, op.Task.Server, op.Task)
	if err != nil {
		return Detail{}, fmt.Errorf("cancel %s: %w", id, &UpstreamError{Err: err})
	}
	caps := conn.Info().Capabilities
	if conn.Info().Era == mcpclient.EraLegacy && !caps.TasksCancel || conn.Info().Era == mcpclient.EraExtension && !caps.Extension {
		return Detail{}, fmt.Errorf("cancel %s: %w", id, ErrCancelNotAdvertised)
	}
	if err := s.cfg.Store.RequestCancel(ctx, id, by, reason, rec.step(StepCancel, op, map[string]any{"requested_by": by})); err != nil {
		return Detail{}, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wf.Budgets.Status.Timeout.Duration)
	defer cancel()
	res, err := conn.CancelTask(cctx, op.Task.TaskID)
	switch {
	case err == nil && res.Task != nil:
		if err := s.cfg.Store.AckCancel(cctx, id, rec.step(StepCancelReply, op, map[string]any{"reply": "acknowledged", "task_status": string(res.Task.Status)})); err != nil {
			return Detail{}, err
		}
		if _, err := s.cfg.Store.Observe(cctx, id, Observation{State: TaskState(res.Task.Status), StatusMessage: res.Task.StatusMessage,
			UpdatedAt: res.Task.LastUpdatedAt, Basis: op.Task.State}, SourceCancelReply); err != nil {
			return Detail{}, err
		}
	case err == nil:
		if err := s.cfg.Store.AckCancel(cctx, id, rec.step(StepCancelReply, op, map[string]any{"reply": "acknowledged"})); err != nil {
			return Detail{}, err
		}
	case errors.Is(err, mcpclient.ErrTaskTerminal) && res.Task != nil:
		_ = s.cfg.Store.AddTimelineRecorded(cctx, id, SourceCancelReply, "cancel_refused", "the task was already "+string(res.Task.Status),
			rec.step(StepCancelReply, op, map[string]any{"reply": "refused: the task was already " + string(res.Task.Status)}))
		if _, err := s.cfg.Store.Observe(cctx, id, Observation{State: TaskState(res.Task.Status), StatusMessage: res.Task.StatusMessage,
			UpdatedAt: res.Task.LastUpdatedAt, Basis: op.Task.State}, SourceCancelReply); err != nil {
			return Detail{}, err
		}
	default:
		_ = s.cfg.Store.AddTimelineRecorded(cctx, id, SourceCancelReply, "cancel_unanswered", "cancel request failed: "+safeMessage(err),
			rec.step(StepCancelReply, op, map[string]any{"reply": "unanswered: " + safeMessage(err)}))
		return Detail{}, fmt.Errorf("cancel %s: %w", id, &UpstreamError{Err: err})
	}
	// Poll soon to see what the cancel did.
	_ = s.cfg.Store.Reschedule(cctx, id, s.cfg.Now())
	return s.Get(cctx, scope, id)
}

// AnswerInput answers one open input request of the operation's task. Scope and the task's
// state are checked again just before sending; the values are sent to the server and never
// stored or logged (only who answered, when and the action).
func (s *Service) AnswerInput(ctx context.Context, scope Scope, id, key, by string, resp mcpclient.InputResponse) (Detail, error) {
	return s.AnswerInputRecorded(ctx, scope, id, key, by, resp, nil)
}

// AnswerInputRecorded is AnswerInput with rec writing the audit row (key, action and the
// server's reply, never the values) in the transaction that records the answer.
func (s *Service) AnswerInputRecorded(ctx context.Context, scope Scope, id, key, by string, resp mcpclient.InputResponse, rec Recorder) (Detail, error) {
	op, err := s.running(ctx, scope, id)
	if err != nil {
		if errors.Is(err, ErrNotCancellable) {
			if gone := s.inputGone(ctx, id, key); gone != nil {
				return Detail{}, gone
			}
			return Detail{}, fmt.Errorf("operation %s: %w", id, ErrNoPendingInput)
		}
		return Detail{}, err
	}
	switch resp.Action {
	case mcpclient.ActionAccept, mcpclient.ActionDecline, mcpclient.ActionCancel:
	default:
		return Detail{}, fmt.Errorf("%w: action must be accept, decline or cancel", ErrInvalidRequest)
	}
	inputs, err := s.cfg.Store.Inputs(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	open := false
	for _, p := range inputs {
		if p.Key == key && p.State == "open" {
			open = p.ExpiresAt == nil || p.ExpiresAt.After(s.cfg.Now())
		}
	}
	if !open || op.Task.State.Final() {
		for _, p := range inputs {
			if why := whyClosed(p, op.Task.State, s.cfg.Now()); p.Key == key && why != "" {
				return Detail{}, fmt.Errorf("operation %s: %w", id, &InputExpiredError{Key: key, Reason: why})
			}
		}
		return Detail{}, fmt.Errorf("operation %s input %q: %w", id, key, ErrNoPendingInput)
	}
	given := resp.Content // what the person typed; defaults the schema filled are the server's own
	for _, p := range inputs {
		if p.Key == key && p.Mode != string(mcpclient.InputURL) && p.Method == "elicitation/create" {
			content, err := checkAnswer(p.Fields, resp)
			if err != nil {
				return Detail{}, fmt.Errorf("operation %s input %q: %w", id, key, err)
			}
			resp.Content = content
		}
	}
	conn, err := s.cfg.Servers.TaskConn(ctx, op.Task.Server, op.Task)
	if err != nil {
		return Detail{}, fmt.Errorf("answer %s: %w", id, &UpstreamError{Err: err})
	}
	// The values' hashes are stored before they are sent, so an echo is cut out by whichever
	// replica reads the server next.
	if err := s.cfg.Store.RememberAnswer(ctx, id, given); err != nil {
		return Detail{}, err
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = conn.AnswerInput(actx, op.Task.TaskID, key, resp)
	if errors.Is(err, mcpclient.ErrUnknownInput) {
		// No connection here holds the question: another live replica does, or the server is
		// asked to deliver it again here.
		if rerr := s.reachInput(actx, op, key, conn); rerr != nil {
			return Detail{}, rerr
		}
		err = conn.AnswerInput(actx, op.Task.TaskID, key, resp)
	}
	if err != nil {
		// A server may quote the answer back in its error ("'4111…' is not valid"): the values
		// never reach the timeline, the audit row, the caller or a log through it.
		err = redactAnswer(err, resp.Content)
		_ = s.cfg.Store.AddTimelineRecorded(actx, id, SourceAnswerReply, "input_refused", fmt.Sprintf("answer to input %s (%s) by %s not taken: %s", key, resp.Action, by, safeMessage(err)),
			rec.step(StepInput, op, map[string]any{"key": key, "action": string(resp.Action), "reply": "not taken: " + safeMessage(err), "values": "redacted"}))
		if errors.Is(err, mcpclient.ErrUnknownInput) {
			return Detail{}, fmt.Errorf("operation %s input %q: %w", id, key, ErrInputElsewhere)
		}
		if errors.Is(err, mcpclient.ErrInputAnswered) {
			return Detail{}, fmt.Errorf("operation %s input %q: %w", id, key, ErrNoPendingInput)
		}
		return Detail{}, fmt.Errorf("answer %s input %q: %w", id, key, &UpstreamError{Err: err})
	}
	if err := s.cfg.Store.MarkInputAnswered(actx, id, key, by, string(resp.Action),
		rec.step(StepInput, op, map[string]any{"key": key, "action": string(resp.Action), "reply": "accepted by the server", "values": "redacted"})); err != nil {
		return Detail{}, err
	}
	_ = s.cfg.Store.Reschedule(actx, id, s.cfg.Now())
	return s.Get(actx, scope, id)
}

// inputGone returns why input key of a task that ended cannot be answered, or nil when the
// input is unknown or was answered.
func (s *Service) inputGone(ctx context.Context, id, key string) error {
	op, err := s.cfg.Store.Get(ctx, id)
	if err != nil || op.Task == nil {
		return nil
	}
	inputs, err := s.cfg.Store.Inputs(ctx, id)
	if err != nil {
		return nil
	}
	for _, p := range inputs {
		if why := whyClosed(p, op.Task.State, s.cfg.Now()); p.Key == key && why != "" {
			return fmt.Errorf("operation %s: %w", id, &InputExpiredError{Key: key, Reason: why})
		}
	}
	return nil
}

// redactedError is an error whose text had elicited values cut out; errors.Is and errors.As
// still see the original.
type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactAnswer returns err with every answered value of content replaced by "[redacted]":
// strings of two or more characters as typed, numbers by their digits however the server
// prints them (see redactText).
func redactAnswer(err error, content map[string]any) error {
	msg := err.Error()
	values := make([]any, 0, len(content))
	for _, v := range content {
		values = append(values, v)
	}
	out := matcherForValues(values).redactText(msg)
	if out == msg {
		return err
	}
	return &redactedError{err: err, msg: out}
}

// InputsFrom converts input requests to pending inputs: the question's words and the fields
// its requested schema describes (a bounded copy of the schema kept), never values.
func InputsFrom(reqs []mcpclient.InputRequest, expires *time.Time) []PendingInput {
	out := make([]PendingInput, 0, len(reqs))
	for _, r := range reqs {
		p := PendingInput{Key: r.Key, Method: r.Method, Mode: string(r.Mode), Message: sanitize(r.Message, MaxInputMessage),
			Fields: []Field{}, RedactionClass: "confidential", ExpiresAt: expires}
		parsed := false
		if len(r.RawSchema) > 0 && len(r.RawSchema) <= MaxSchemaBytes {
			p.RequestedSchema = compactJSON(r.RawSchema)
			if title, desc, fields, err := parseRequestedSchema(r.RawSchema); err == nil {
				p.Title, p.Description, p.Fields, parsed = title, desc, fields, true
			} else {
				p.Description = sanitize("The server's requested schema could not be used: "+err.Error(), maxDescription)
			}
		}
		for _, f := range r.RequestedSchema {
			if !parsed {
				p.Fields = append(p.Fields, Field{Name: f.Name, Type: f.Type, Required: f.Required})
			}
		}
		if r.Mode == mcpclient.InputURL {
			p.RedactionClass = "none"
		}
		out = append(out, p)
	}
	return out
}

// UpstreamError is a failure of the MCP server an action was sent to (unreachable, refused,
// or unanswered within the budget); the API answers it 502, or 504 on a timeout.
type UpstreamError struct{ Err error }

func (e *UpstreamError) Error() string { return "the server: " + e.Err.Error() }

// Unwrap returns the server's error.
func (e *UpstreamError) Unwrap() error { return e.Err }

// Timeout reports whether the server did not answer within the budget.
func (e *UpstreamError) Timeout() bool { return errors.Is(e.Err, context.DeadlineExceeded) }
