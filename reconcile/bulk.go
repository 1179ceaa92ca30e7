package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
)

// Bulk actions.
const (
	BulkClaim    = "claim"
	BulkRelease  = "release"
	BulkReverify = "reverify"
	BulkResolve  = "resolve"
)

// BulkMax caps how many items one batch may touch.
const BulkMax = 1000

// BulkRequest is a bulk action over the items a filter selects.
type BulkRequest struct {
	Filter Filter
	// Action is claim, release, reverify or resolve.
	Action string
	// Confirm must equal ConfirmPhrase(Action, n) for the n items the filter selects now.
	Confirm string
	// Resolution is required for resolve.
	Resolution Resolution
	// Lease is the claim lease for claim (DefaultLease when zero).
	Lease time.Duration
}

// BatchResult says what a bulk action did.
type BatchResult struct {
	BatchID int64
	Matched int
	Applied int
	// Skipped lists items left alone, with why (claimed by someone else, closed).
	Skipped map[string]string
}

// ConfirmPhrase is what a person types to confirm a bulk action over n items.
func ConfirmPhrase(action string, n int) string { return action + " " + strconv.Itoa(n) + " items" }

// Preview counts the open items a filter selects in scope (the bulk action's preview).
func (s *Store) Preview(ctx context.Context, scope Scope, f Filter) (int, error) {
	if f.State == "closed" || f.State == "all" || f.State == string(StateSettled) || f.State == string(StateResolved) {
		return 0, fmt.Errorf("%w: bulk actions apply to open items only", ErrInvalid)
	}
	var args []any
	w, err := where(scope, f, &args)
	if err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM reconciliation_items r WHERE `+w, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("preview: %w", err)
	}
	return n, nil
}

// Bulk runs one action over every open item the filter selects in scope, as one audited batch
// in one transaction. The typed confirmation must name the action and the number of items
// selected now; items another person holds are skipped, never taken over.
func (s *Store) Bulk(ctx context.Context, actor audit.Actor, scope Scope, req BulkRequest) (BatchResult, error) {
	switch req.Action {
	case BulkClaim, BulkRelease, BulkReverify:
	case BulkResolve:
		if err := s.validate(req.Resolution); err != nil {
			return BatchResult{}, err
		}
	default:
		return BatchResult{}, fmt.Errorf("%w: bulk action %q", ErrInvalid, req.Action)
	}
	if req.Lease <= 0 {
		req.Lease = DefaultLease
	}
	res := BatchResult{Skipped: map[string]string{}}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		f := req.Filter
		if f.State == "closed" || f.State == "all" {
			return fmt.Errorf("%w: bulk actions apply to open items only", ErrInvalid)
		}
		f.After = ""
		var args []any
		w, err := where(scope, f, &args)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT r.public_id::text FROM reconciliation_items r WHERE `+w+` ORDER BY r.opened_at, r.public_id FOR UPDATE`, args...)
		if err != nil {
			return fmt.Errorf("bulk select: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("bulk select: %w", err)
		}
		res.Matched = len(ids)
		if strings.TrimSpace(req.Confirm) != ConfirmPhrase(req.Action, len(ids)) {
			return fmt.Errorf("%w: type %q", ErrConfirmation, ConfirmPhrase(req.Action, len(ids)))
		}
		if len(ids) > BulkMax {
			return fmt.Errorf("%w: %d items, at most %d per batch", ErrInvalid, len(ids), BulkMax)
		}
		filterJSON := map[string]any{"tenant": f.Tenant, "workflow": f.Workflow, "reason": f.Reason, "state": f.State,
			"older_than": f.OlderThan.String(), "claimed_by": f.ClaimedBy}
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_batches (actor, action, filter, matched, applied, skipped)
			VALUES ($1,$2,$3,$4,0,0) RETURNING id`, actor.Name, req.Action, filterJSON, len(ids)).Scan(&res.BatchID); err != nil {
			return fmt.Errorf("record batch: %w", err)
		}
		batch := &res.BatchID
		for _, id := range ids {
			// Each item in a savepoint: a refused item is skipped, the rest go on.
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				it, err := lockItem(ctx, sp, scope, id)
				if err != nil {
					return err
				}
				switch req.Action {
				case BulkClaim:
					_, err = claimTx(ctx, sp, actor, it, req.Lease, batch)
				case BulkRelease:
					if it.ClaimedBy != actor.Name {
						return ErrNotClaimed
					}
					if _, err = sp.Exec(ctx, `UPDATE reconciliation_items SET claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL WHERE id = $1`, it.seq); err == nil {
						err = audit.Record(ctx, sp, audit.Entry{Actor: actor, Tenant: it.Tenant, Action: "reconcile.release", Target: target(id),
							Before: claimView(it), After: map[string]any{"batch": *batch}})
					}
				case BulkReverify:
					_, err = reverifyTx(ctx, sp, actor, it, batch)
				case BulkResolve:
					if it.ClaimedBy == "" {
						if it, err = claimTx(ctx, sp, actor, it, req.Lease, batch); err != nil {
							return err
						}
					}
					_, err = resolveTx(ctx, sp, actor, it, req.Resolution, batch)
				}
				return err
			})
			switch {
			case err == nil:
				res.Applied++
			case errors.Is(err, ErrClaimed):
				res.Skipped[id] = "claimed by someone else"
			case errors.Is(err, ErrNotClaimed):
				res.Skipped[id] = "not claimed by you"
			case errors.Is(err, ErrClosed):
				res.Skipped[id] = "closed"
			default:
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE reconciliation_batches SET applied = $2, skipped = $3 WHERE id = $1`,
			res.BatchID, res.Applied, len(res.Skipped)); err != nil {
			return fmt.Errorf("record batch: %w", err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: f.Tenant, Action: "reconcile.batch",
			Target: "reconciliation-batch:" + strconv.FormatInt(res.BatchID, 10),
			After:  map[string]any{"action": req.Action, "filter": filterJSON, "matched": res.Matched, "applied": res.Applied, "skipped": len(res.Skipped)},
			Reason: req.Confirm})
	})
	if err != nil {
		return BatchResult{}, err
	}
	return res, nil
}
