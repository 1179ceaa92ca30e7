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
	"github.com/taskgate/taskgate/internal/safetext"
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
	// BatchID is the batch's public id (a version 4 UUID); its row key is never shown.
	BatchID string
	Matched int
	Applied int
	// Skipped lists items left alone, with why (claimed by someone else, closed).
	Skipped map[string]string
}

// ConfirmPhrase is what a person types to confirm a bulk action over n items.
func ConfirmPhrase(action string, n int) string { return action + " " + strconv.Itoa(n) + " items" }

// Preview counts the open items a filter selects in scope (the bulk action's preview): from the
// queue's counts unless it filters by age or claim.
func (s *Store) Preview(ctx context.Context, scope Scope, f Filter) (int, error) {
	if f.State == "closed" || f.State == "all" || f.State == string(StateSettled) || f.State == string(StateResolved) {
		return 0, fmt.Errorf("%w: bulk actions apply to open items only", ErrInvalid)
	}
	return s.Count(ctx, scope, f)
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
	batch := &batchRef{}
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
		if !scope.All {
			// The tenants the runner could reach: who may read the batch when no tenant was named.
			filterJSON["scope"] = scope.Tenants
		}
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_batches (actor, action, filter, matched, applied, skipped)
			VALUES ($1,$2,$3,$4,0,0) RETURNING id, public_id::text`, actor.Name, req.Action, filterJSON, len(ids)).Scan(&batch.seq, &batch.id); err != nil {
			return fmt.Errorf("record batch: %w", err)
		}
		res.BatchID = batch.id
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
							Before: claimView(it), After: map[string]any{"batch": batch.id}})
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
			batch.seq, res.Applied, len(res.Skipped)); err != nil {
			return fmt.Errorf("record batch: %w", err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: f.Tenant, Action: "reconcile.batch",
			Target: BatchTarget(batch.id),
			After:  map[string]any{"action": req.Action, "filter": filterJSON, "matched": res.Matched, "applied": res.Applied, "skipped": len(res.Skipped)},
			Reason: req.Confirm})
	})
	if err != nil {
		return BatchResult{}, err
	}
	return res, nil
}

// batchRef is a batch as the store knows it: its row key, kept inside, and its public id.
type batchRef struct {
	seq int64
	id  string
}

// key is the row key to store in an item (nil for no batch).
func (b *batchRef) key() *int64 {
	if b == nil {
		return nil
	}
	return &b.seq
}

// public is the public id to show on an item (nil for no batch).
func (b *batchRef) public() *string {
	if b == nil {
		return nil
	}
	id := b.id
	return &id
}

// BatchTarget is the audit target naming a batch by its public id.
func BatchTarget(id string) string { return "reconciliation-batch:" + id }

// Batch is one bulk action as recorded.
type Batch struct {
	ID      string
	Actor   string
	Action  string
	Tenant  string
	Matched int
	Applied int
	Skipped int
	At      time.Time
	// Resolved lists the public ids of the items the batch resolved, in order.
	Resolved []string
}

// Batch returns a bulk action if it is in scope: an account scoped to tenants sees a batch
// whose filter named one of its tenants. Another tenant's batch, an id of the wrong form (an
// old numeric one among them) and a missing batch are all ErrNotFound.
func (s *Store) Batch(ctx context.Context, scope Scope, id string) (Batch, error) {
	if !ValidID(id) {
		return Batch{}, fmt.Errorf("batch %q: %w", safetext.CutPlain(id, 40), ErrNotFound)
	}
	var b Batch
	var seq int64
	var reach []string
	err := s.pool.QueryRow(ctx, `SELECT id, public_id::text, actor, action, coalesce(filter ->> 'tenant', ''),
		coalesce(ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(filter -> 'scope') = 'array' THEN filter -> 'scope' ELSE '[]' END)), '{}'),
		matched, applied, skipped, created_at
		FROM reconciliation_batches WHERE public_id = $1::uuid`, id).Scan(&seq, &b.ID, &b.Actor, &b.Action, &b.Tenant, &reach,
		&b.Matched, &b.Applied, &b.Skipped, &b.At)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !batchInScope(scope, b.Tenant, reach)) {
		return Batch{}, fmt.Errorf("batch %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batch %s: %w", id, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT public_id::text FROM reconciliation_items WHERE batch_id = $1 ORDER BY closed_at, public_id`, seq)
	if err != nil {
		return Batch{}, fmt.Errorf("batch %s: %w", id, err)
	}
	if b.Resolved, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return Batch{}, fmt.Errorf("batch %s: %w", id, err)
	}
	return b, nil
}

// batchInScope reports whether scope may read a batch run on tenant (or, when no tenant was
// named, over the tenants reach the runner could reach; none recorded means every tenant).
func batchInScope(scope Scope, tenant string, reach []string) bool {
	if scope.All {
		return true
	}
	if tenant != "" {
		return scope.Allows(tenant)
	}
	if len(reach) == 0 {
		return false
	}
	for _, t := range reach {
		if !scope.Allows(t) {
			return false
		}
	}
	return true
}
