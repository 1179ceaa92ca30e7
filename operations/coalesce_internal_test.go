package operations

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// heldCoalescer keeps a coalescer's only round trip in flight (a statement waiting for an
// advisory lock the test holds), so that what callers send meanwhile queues up; release lets it
// finish, and the queued statements go in the next round trip.
func heldCoalescer(t *testing.T, pool *pgxpool.Pool, c *coalescer, key int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- c.row(ctx, func(r pgx.Row) error { var v any; return r.Scan(&v) }, `SELECT pg_advisory_xact_lock($1)::text`, key)
	}()
	waitFor(t, "the holding statement in flight", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.active == c.leaders && len(c.queue) == 0
	})
	// The holding statement is on the wire once its backend waits for the lock.
	waitFor(t, "the holding statement waiting for its lock", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`, key).Scan(&n)
		return err == nil && n == 1
	})
	return func() {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			t.Error(err)
		}
		conn.Release()
		if err := <-done; err != nil {
			t.Errorf("holding statement: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func queued(c *coalescer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// TestCoalescedStatementsShareOneTransactionAndAnswerEachCaller: statements sent while a round
// trip is in flight go together in the next, in one transaction (one commit), and each caller
// gets its own statement's answer: its row, or pgx.ErrNoRows for a conflict, which is an answer
// and not a failure (the others are not sent again).
func TestCoalescedStatementsShareOneTransactionAndAnswerEachCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE co (k int PRIMARY KEY, tx xid8 NOT NULL DEFAULT pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO co (k) VALUES (5)`); err != nil {
		t.Fatal(err)
	}
	c := newCoalescer(pool, DefaultCoalesceMax, 1, false)
	release := heldCoalescer(t, pool, c, 71)
	const n = 10
	got, errs := make([]int, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = c.row(ctx, func(r pgx.Row) error { return r.Scan(&got[i]) },
				`INSERT INTO co (k) VALUES ($1) ON CONFLICT (k) DO NOTHING RETURNING k * 10`, i)
		})
	}
	waitFor(t, "ten statements queued", func() bool { return queued(c) == n })
	release()
	wg.Wait()
	for i := range n {
		switch {
		case i == 5 && !errors.Is(errs[i], pgx.ErrNoRows):
			t.Errorf("statement 5 (a conflict): %v, want no rows", errs[i])
		case i != 5 && (errs[i] != nil || got[i] != i*10):
			t.Errorf("statement %d: %d %v, want %d", i, got[i], errs[i], i*10)
		}
	}
	if b, s := c.stats(); b != 1 || s != n {
		t.Fatalf("%d batches of %d statements, want 1 of %d", b, s, n)
	}
	var txs, rows int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT tx), count(*) FROM co WHERE k <> 5`).Scan(&txs, &rows); err != nil {
		t.Fatal(err)
	}
	if txs != 1 || rows != n-1 {
		t.Fatalf("%d rows in %d transactions, want %d in 1", rows, txs, n-1)
	}
	// Alone, a statement goes as it is, in its own transaction.
	var k int
	if err := c.row(ctx, func(r pgx.Row) error { return r.Scan(&k) }, `INSERT INTO co (k) VALUES (100) RETURNING k`); err != nil || k != 100 {
		t.Fatalf("alone: %d %v", k, err)
	}
	if b, _ := c.stats(); b != 1 {
		t.Fatalf("a statement alone counted as a batch (%d)", b)
	}
}

// TestARefusedStatementFailsOnlyItsCaller: PostgreSQL refusing one statement of a batch aborts
// the batch's transaction; every other statement is then sent again alone and committed, and
// only the refused one's caller gets the error. Statements without rows get their tags.
func TestARefusedStatementFailsOnlyItsCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE co (k int PRIMARY KEY CHECK (k <> 3), tx xid8 NOT NULL DEFAULT pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	c := newCoalescer(pool, DefaultCoalesceMax, 1, false)
	release := heldCoalescer(t, pool, c, 72)
	const n = 6
	tags, errs := make([]pgconn.CommandTag, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { tags[i], errs[i] = c.Exec(ctx, `INSERT INTO co (k) VALUES ($1)`, i) })
	}
	waitFor(t, "six statements queued", func() bool { return queued(c) == n })
	release()
	wg.Wait()
	for i := range n {
		var pe *pgconn.PgError
		switch {
		case i == 3 && !(errors.As(errs[i], &pe) && pe.Code == "23514"):
			t.Errorf("statement 3 (refused): %v, want a check violation", errs[i])
		case i != 3 && (errs[i] != nil || tags[i].RowsAffected() != 1):
			t.Errorf("statement %d: %v %v", i, tags[i], errs[i])
		}
	}
	var rows, txs int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT tx) FROM co`).Scan(&rows, &txs); err != nil {
		t.Fatal(err)
	}
	if rows != n-1 || txs != n-1 {
		t.Fatalf("%d rows in %d transactions, want %d, each sent again alone", rows, txs, n-1)
	}
}

// TestAsyncCoalescerCommitsWithoutWaitingForTheFlush: the reservations' coalescer sets
// synchronous_commit off for its transactions, alone or together; the start writes' keeps it on.
func TestAsyncCoalescerCommitsWithoutWaitingForTheFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The test cluster commits asynchronously: these sessions say synchronous_commit = on.
	cfg := pgtest.New(t).Config().Copy()
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	setting := func(c *coalescer) string {
		var v string
		if err := c.row(ctx, func(r pgx.Row) error { return r.Scan(&v) }, `SELECT current_setting('synchronous_commit')`); err != nil {
			t.Fatal(err)
		}
		return v
	}
	async, durable := newCoalescer(pool, DefaultCoalesceMax, 1, true), newCoalescer(pool, DefaultCoalesceMax, 1, false)
	if a, s := setting(async), setting(durable); a != "off" || s != "on" {
		t.Fatalf("alone: async %q, durable %q", a, s)
	}
	release := heldCoalescer(t, pool, async, 73)
	vals := make([]string, 3)
	var wg sync.WaitGroup
	for i := range vals {
		wg.Go(func() {
			if err := async.row(ctx, func(r pgx.Row) error { return r.Scan(&vals[i]) }, `SELECT current_setting('synchronous_commit')`); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "three statements queued", func() bool { return queued(async) == 3 })
	release()
	wg.Wait()
	if b, _ := async.stats(); b != 1 || vals[0] != "off" || vals[1] != "off" || vals[2] != "off" {
		t.Fatalf("together (%d batches): %v", b, vals)
	}
}

// TestCoalescedReservationsKeepTheCapExact: reservations of a workflow's slots that share one
// transaction see the counter as the one before left it, so a burst past the cap in one round
// trip grants exactly the cap.
func TestCoalescedReservationsKeepTheCapExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	s := NewStore(pool)
	s.reservations = newCoalescer(pool, DefaultCoalesceMax, 1, true)
	const wf, limit, n = "capped", 3, 8
	atCap := errors.New("at the cap")
	insert := func(key string) Insert { return capped(taskInsert(wf, key), limit, atCap) }
	// The counter exists (its first use counts the ledger alone).
	if _, slot, err := s.applyCapacity(ctx, insert("first")); err != nil || slot == nil {
		t.Fatalf("first reservation: %v", err)
	} else {
		slot.settle(ctx, false)
	}
	release := heldCoalescer(t, pool, s.reservations, 74)
	slots, errs := make([]*capacitySlot, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, slots[i], errs[i] = s.applyCapacity(ctx, insert(fmt.Sprint("burst-", i))) })
	}
	waitFor(t, "eight reservations queued", func() bool { return queued(s.reservations) == n })
	release()
	wg.Wait()
	granted := 0
	for i := range n {
		switch {
		case errs[i] == nil && slots[i] != nil:
			granted++
		case !errors.Is(errs[i], atCap):
			t.Fatalf("reservation %d: %v", i, errs[i])
		}
	}
	if b, st := s.reservations.stats(); b != 1 || st != n {
		t.Fatalf("%d batches of %d reservations, want 1 of %d", b, st, n)
	}
	if granted != limit || inFlightOf(t, s, wf) != limit {
		t.Fatalf("granted %d, counter %d; want %d", granted, inFlightOf(t, s, wf), limit)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM capacity_slots WHERE workflow = $1`, wf).Scan(&rows); err != nil || rows != limit {
		t.Fatalf("%d reservation rows (%v), want %d", rows, err, limit)
	}
}

// TestCoalescedStartsEachGetTheirOwnOperation: Task starts whose ledger writes share a round
// trip each get their own operation, call marker and creating task, committed together; a key
// sent twice in the same batch is one operation, the second send a repeat; and a start whose
// values PostgreSQL refuses fails alone while the others are written.
func TestCoalescedStartsEachGetTheirOwnOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	s := NewStore(pool)
	s.writes = newCoalescer(pool, DefaultCoalesceMax, 1, false)
	insert := func(key, object string) Insert {
		in := taskInsert("wf", key)
		in.Request.ObjectRef, in.Sending = object, time.Minute
		return in
	}
	// round sends the inserts while the coalescer's round trip is held, in order, so that each
	// follows the one before in the batch.
	round := func(key int64, ins ...Insert) ([]Operation, []bool, []error) {
		release := heldCoalescer(t, pool, s.writes, key)
		ops, existing, errs := make([]Operation, len(ins)), make([]bool, len(ins)), make([]error, len(ins))
		var wg sync.WaitGroup
		for i := range ins {
			wg.Go(func() { ops[i], existing[i], errs[i] = s.CreateOperation(ctx, ins[i]) })
			waitFor(t, "the start queued", func() bool { return queued(s.writes) == i+1 })
		}
		release()
		wg.Wait()
		return ops, existing, errs
	}
	ops, existing, errs := round(75, insert("a", "o"), insert("b", "o"), insert("a", "o"), insert("d", "o"))
	if b, st := s.writes.stats(); b != 1 || st != 4 {
		t.Fatalf("%d batches of %d statements, want 1 of 4", b, st)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if existing[0] || existing[1] || !existing[2] || existing[3] || ops[2].ID != ops[0].ID {
		t.Fatalf("existing %v; the repeat of a is %s, a is %s", existing, ops[2].ID, ops[0].ID)
	}
	if ops[0].ID == ops[1].ID || ops[1].ID == ops[3].ID || ops[0].ID == ops[3].ID {
		t.Fatalf("two starts share an operation: %s %s %s", ops[0].ID, ops[1].ID, ops[3].ID)
	}
	count := func() (opsN, txs, calls, tasks, timeline int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM operations), (SELECT count(DISTINCT xmin::text) FROM operations),
			(SELECT count(*) FROM operation_calls WHERE sent_at IS NOT NULL),
			(SELECT count(*) FROM tasks WHERE state = 'creating'), (SELECT count(*) FROM task_timeline)`).Scan(&opsN, &txs, &calls, &tasks, &timeline); err != nil {
			t.Fatal(err)
		}
		return
	}
	if o, x, c, tk, tl := count(); o != 3 || x != 1 || c != 3 || tk != 3 || tl != 3 {
		t.Fatalf("operations %d in %d transactions, calls %d, tasks %d, timeline %d; want 3 of each in 1", o, x, c, tk, tl)
	}
	// PostgreSQL refuses a NUL in text: that start fails, the other is written alone.
	_, existing, errs = round(76, insert("e", "bad\x00ref"), insert("f", "o"))
	if errs[0] == nil || errs[1] != nil || existing[1] {
		t.Fatalf("refused start: %v; the other: %v (existing %v)", errs[0], errs[1], existing[1])
	}
	if o, x, c, tk, tl := count(); o != 4 || x != 2 || c != 4 || tk != 4 || tl != 4 {
		t.Fatalf("operations %d in %d transactions, calls %d, tasks %d, timeline %d; want 4 of each in 2", o, x, c, tk, tl)
	}
}
