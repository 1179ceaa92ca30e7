package operations

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Steps of operator actions a Recorder is called for.
const (
	// StepCancel: a cancel request was recorded (before it is sent).
	StepCancel = "operation.cancel"
	// StepCancelReply: the server's reply to a cancel request (acknowledged, refused or none).
	StepCancelReply = "operation.cancel_reply"
	// StepInput: an input request was answered, or the answer was refused by the server.
	StepInput = "operation.input"
)

// Step is one recorded step of an operator action on an operation.
type Step struct {
	// Action is StepCancel, StepCancelReply or StepInput.
	Action string
	// Operation is the operation acted on (its tenant and id).
	Operation Operation
	// After says what the step recorded, with the server's reply under "reply". It never holds
	// elicited values.
	After map[string]any
}

// Recorder writes the audit row of a step inside the transaction that records the step, so the
// step and its audit row commit together or not at all. The console and the API pass one that
// calls audit.Record with the acting principal; nil records nothing.
type Recorder func(ctx context.Context, tx pgx.Tx, s Step) error

// TxFunc is an extra write a store method makes inside its own transaction.
type TxFunc func(ctx context.Context, tx pgx.Tx) error

// step binds a step to the recorder; nil when there is no recorder.
func (r Recorder) step(action string, op Operation, after map[string]any) TxFunc {
	if r == nil {
		return nil
	}
	st := Step{Action: action, Operation: op, After: after}
	return func(ctx context.Context, tx pgx.Tx) error { return r(ctx, tx, st) }
}

func runAlso(ctx context.Context, tx pgx.Tx, also []TxFunc) error {
	for _, f := range also {
		if f == nil {
			continue
		}
		if err := f(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// AddTimelineRecorded appends a timeline entry and runs also in the same transaction.
func (s *Store) AddTimelineRecorded(ctx context.Context, opID, source, state, message string, also ...TxFunc) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := addTimeline(ctx, tx, opID, source, state, message); err != nil {
			return err
		}
		return runAlso(ctx, tx, also)
	})
}
