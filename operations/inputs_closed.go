package operations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrInputExpired: the input request exists but no answer can reach the server any more.
var ErrInputExpired = errors.New("input request expired")

// InputExpiredError says why an input request can no longer be answered.
type InputExpiredError struct {
	// Key is the input request.
	Key string
	// Reason says why, in words.
	Reason string
}

// Error implements error.
func (e *InputExpiredError) Error() string {
	return fmt.Sprintf("input %q can no longer be answered: %s", e.Key, e.Reason)
}

// Unwrap returns ErrInputExpired.
func (e *InputExpiredError) Unwrap() error { return ErrInputExpired }

// InputClosedReason says why question p of a task in state st can no longer be answered at
// now, in words, or "" when it still can be or was answered.
func InputClosedReason(p PendingInput, st TaskState, now time.Time) string {
	return whyClosed(p, st, now)
}

// whyClosed says why input p of a task in state st cannot be answered at now, or "" when it
// can (or when it was answered: that is not an expiry).
func whyClosed(p PendingInput, st TaskState, now time.Time) string {
	switch {
	case p.AnsweredAt != nil || p.State == "answered":
		return ""
	case p.State == "moved_on":
		return "the task moved on without an answer (now " + st.Words() + ")"
	case p.State == "expired":
		return "the question was closed: the task is " + st.Words()
	case p.ExpiresAt != nil && !p.ExpiresAt.After(now):
		return "the question expired at " + p.ExpiresAt.UTC().Format("2006-01-02 15:04:05 UTC")
	case st.Final():
		return "the task is " + st.Words() + ", no longer waiting for input"
	}
	// An open question of a task stored as working is answerable: leaving input_required
	// closes every open question (moveOnInputs), so this one was asked after that, and the
	// stored state has not caught up yet (a question reaches the console on the server's
	// stream before the status read that shows input_required). The server judges the answer.
	return ""
}

// closeOpenInputs closes the open inputs of a task that will not ask again (unobservable,
// expired), with the reason on the timeline.
func closeOpenInputs(ctx context.Context, tx pgx.Tx, opID string, state TaskState, message string) error {
	rows, err := tx.Query(ctx, `UPDATE pending_inputs SET state = 'expired' WHERE operation_id = $1 AND state = 'open' RETURNING input_key`, opID)
	if err != nil {
		return fmt.Errorf("close inputs of %s: %w", opID, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("close inputs of %s: %w", opID, err)
	}
	for _, k := range keys {
		if err := addTimeline(ctx, tx, opID, SourceWatcher, "input_closed", "input "+k+" closed unanswered: the task is "+state.Words()+" ("+message+")"); err != nil {
			return err
		}
	}
	return nil
}

// moveOnInputs closes the open inputs of a task that left input_required without our answer
// (it went on working, or ended), with the state it moved to on the timeline.
func moveOnInputs(ctx context.Context, tx pgx.Tx, opID string, state TaskState) error {
	rows, err := tx.Query(ctx, `UPDATE pending_inputs SET state = 'moved_on' WHERE operation_id = $1 AND state = 'open' RETURNING input_key`, opID)
	if err != nil {
		return fmt.Errorf("close inputs of %s: %w", opID, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("close inputs of %s: %w", opID, err)
	}
	for _, k := range keys {
		if err := addTimeline(ctx, tx, opID, SourceWatcher, "input_closed", "input "+k+" closed unanswered: the task moved on to "+state.Words()); err != nil {
			return err
		}
	}
	return nil
}
