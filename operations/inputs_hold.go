package operations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/mcpclient"
)

// A 2025-11-25 question is a server request held open on a tasks/result stream: only the
// process whose connection holds it can send the answer. The watcher records which replica
// holds each question; an answer given where the question is not held is refused as held
// elsewhere only while that replica is alive. Otherwise this process opens tasks/result
// itself, so the server delivers its queued request again, and answers it. A question closes
// only when the server stopped waiting (the task moved on or ended, its deadline passed); a
// server that asks a closed, unanswered question again reopens it.

// InputHolder is the watcher side of answering held questions.
type InputHolder struct {
	// Replica is this process's watcher replica.
	Replica string
	// Reopen makes sure a tasks/result wait is open for the operation's task in this process.
	Reopen func(ctx context.Context, opID string) error
}

// SetInputHolder tells the service which replica this process's watcher is and how to open
// tasks/result for a question the server should ask again.
func (s *Service) SetInputHolder(h InputHolder) { s.holder.Store(&h) }

// holderOf is the registered InputHolder, if any.
func (s *Service) holderOf() *InputHolder { return s.holder.Load() }

// inputHolders is embedded in Service.
type inputHolders struct {
	holder atomic.Pointer[InputHolder]
}

// The holder of a question is on the operation's timeline ("input K held by replica R"): it
// is news for the people following the task too, and needs no column of its own.

// heldPrefix starts the timeline message naming the holder of question key.
func heldPrefix(key string) string { return "input " + key + " held by replica " }

// HoldInput records that replica holds the open question key of an operation (once per
// change of holder); a hold that ends sooner than the stored expiry (a question asked again
// later) keeps the earlier one.
func (s *Store) HoldInput(ctx context.Context, opID, key, replica string, expires *time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE pending_inputs SET
			expires_at = CASE WHEN $3::timestamptz IS NULL THEN expires_at ELSE least(coalesce(expires_at, $3), $3) END
			WHERE operation_id = $1 AND input_key = $2 AND state = 'open'`, opID, key, expires)
		if err != nil {
			return fmt.Errorf("hold input %q of %s: %w", key, opID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		var last string
		err = tx.QueryRow(ctx, `SELECT message FROM task_timeline WHERE operation_id = $1 AND state = 'input_held'
			AND starts_with(message, $2) ORDER BY id DESC LIMIT 1`, opID, heldPrefix(key)).Scan(&last)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("holder of input %q of %s: %w", key, opID, err)
		}
		if last == heldPrefix(key)+replica {
			return nil
		}
		return addTimeline(ctx, tx, opID, SourceWatcher, "input_held", heldPrefix(key)+replica)
	})
}

// InputHolder returns the replica that last held the open question and whether it is alive
// (beats); "" when no replica holds it.
func (s *Store) InputHolder(ctx context.Context, opID, key string) (string, bool, error) {
	var msg string
	var alive bool
	err := s.pool.QueryRow(ctx, `SELECT t.message, EXISTS (SELECT 1 FROM watcher_replicas r
			WHERE r.replica = substr(t.message, length($2) + 1) AND r.beat_at + r.stale_after_ms * interval '1 millisecond' >= now())
		FROM task_timeline t WHERE t.operation_id = $1 AND t.state = 'input_held' AND starts_with(t.message, $2)
		AND EXISTS (SELECT 1 FROM pending_inputs p WHERE p.operation_id = $1 AND p.input_key = $3 AND p.state = 'open')
		ORDER BY t.id DESC LIMIT 1`, opID, heldPrefix(key), key).Scan(&msg, &alive)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("holder of input %q of %s: %w", key, opID, err)
	}
	return strings.TrimPrefix(msg, heldPrefix(key)), alive, nil
}

// reachInput is called when this process's connection holds no request for question key: it
// reports a live replica that holds it (ErrInputElsewhere), or opens tasks/result so the server
// asks it again here and waits for that, up to InputReopenWait. A server that does not ask
// again in that time may still hold it elsewhere: the answer is refused as held elsewhere and
// the question stays open.
func (s *Service) reachInput(ctx context.Context, op Operation, key string, conn mcpclient.Conn) error {
	holder, alive, err := s.cfg.Store.InputHolder(ctx, op.ID, key)
	if err == nil && holder == "" {
		// A question is stored a moment before its holder: look again before reopening.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
		holder, alive, err = s.cfg.Store.InputHolder(ctx, op.ID, key)
	}
	if err != nil {
		return err
	}
	h := s.holderOf()
	me := ""
	if h != nil {
		me = h.Replica
	}
	if holder != "" && holder != me && alive {
		return fmt.Errorf("operation %s input %q: %w (%s)", op.ID, key, ErrInputElsewhere, holder)
	}
	if h != nil && h.Reopen != nil && op.Task.Era == string(mcpclient.EraLegacy) {
		if err := h.Reopen(ctx, op.ID); err != nil {
			return fmt.Errorf("operation %s input %q: %w", op.ID, key, &UpstreamError{Err: err})
		}
		wait := time.NewTimer(s.cfg.InputReopenWait)
		defer wait.Stop()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, r := range conn.PendingInput(op.Task.TaskID) {
				if r.Key == key {
					return nil
				}
			}
			select {
			case <-tick.C:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-wait.C:
			}
			break
		}
	}
	// Not asked again here: the server may still hold it on a connection it has not yet seen
	// close (a replica whose beats lapsed under load, a killed process), and it keeps waiting
	// until the task moves on or the question's deadline passes. The question stays open.
	return fmt.Errorf("operation %s input %q: %w (%s)", op.ID, key, ErrInputElsewhere, NotAskedAgain)
}

// NotAskedAgain says why an answer was not sent when the server did not ask its question
// again on a fresh tasks/result: the question stays open for a later answer.
const NotAskedAgain = "the server did not ask it again here; it may still be held on another connection, try again shortly"
