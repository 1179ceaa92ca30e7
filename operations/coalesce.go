package operations

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Coalescing defaults.
const (
	// DefaultCoalesceMax is the most statements one coalesced round trip carries.
	DefaultCoalesceMax = 64
	// DefaultCoalesceLeaders is how many coalesced round trips may be in flight at once.
	DefaultCoalesceLeaders = 2
	// coalesceTimeout bounds one coalesced round trip, which no single caller may cancel.
	coalesceTimeout = time.Minute
)

// coalescer sends the single-statement writes of concurrent starts (the ledger row before the
// call, the answer after it) together: statements that arrive while a round trip is in flight
// wait for it, then go as one pipelined batch in one round trip, one implicit transaction and so
// one commit and one WAL flush. Nobody waits for a timer: a statement that finds a round trip
// free goes at once, alone, exactly as it would without the coalescer; only under load do
// statements share a commit, so the cost of a commit, a flush and the network round trip is paid
// once per batch rather than once per start.
//
// A batch is all or nothing on the server (one transaction). When PostgreSQL refused any of its
// statements nothing of it was committed, and each statement is then sent again alone, so one
// bad statement fails only its own caller. When the round trip failed otherwise (the connection
// broke), whether it committed is unknown, and every caller gets that error, as each would have
// alone.
type coalescer struct {
	pool    *pgxpool.Pool
	max     int
	leaders int
	// async commits every round trip without waiting for its flush (asyncCommit), for writes
	// that may be lost in a crash with nothing depending on them (a cap's reservations).
	async bool

	mu     sync.Mutex
	queue  []*coalesced
	active int // leaders flushing or handed the lead

	// batches counts the round trips that carried more than one statement (tests).
	batches, coalescedStatements int
}

// coalesced is one statement waiting to be sent: a statement with a row (scan reads it, and
// pgx.ErrNoRows is the statement's answer, not a failure) or one without (tag reads its tag).
// scan and tag may run twice (a batch refused as a whole is sent again statement by statement):
// the second answer is the one that counts, so they must not keep anything from the first.
type coalesced struct {
	sql  string
	args []any
	scan func(pgx.Row) error
	tag  func(pgconn.CommandTag) error

	err  error
	wake chan struct{}
	lead bool
	done bool
}

func newCoalescer(pool *pgxpool.Pool, max, leaders int, async bool) *coalescer {
	return &coalescer{pool: pool, max: max, leaders: leaders, async: async}
}

// row sends a statement with one row, coalesced with others, and returns what scan returned.
func (c *coalescer) row(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	return c.do(ctx, &coalesced{sql: sql, args: args, scan: scan})
}

// Exec sends a statement without rows, coalesced with others, and returns its tag.
func (c *coalescer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var t pgconn.CommandTag
	err := c.do(ctx, &coalesced{sql: sql, args: args, tag: func(ct pgconn.CommandTag) error { t = ct; return nil }})
	return t, err
}

// do queues q and returns when it was sent. The caller leads a round trip when fewer than
// leaders are in flight, or when a finishing leader hands it the lead; otherwise it waits for a
// leader to take its statement. It waits whatever ctx says: its statement may already be on the
// wire with others, and a write whose caller hung up is still a write.
func (c *coalescer) do(ctx context.Context, q *coalesced) error {
	q.wake = make(chan struct{}, 1)
	c.mu.Lock()
	c.queue = append(c.queue, q)
	if c.active < c.leaders {
		c.active++
		q.lead = true
	}
	c.mu.Unlock()
	for {
		c.mu.Lock()
		lead, done := q.lead, q.done
		q.lead = false
		c.mu.Unlock()
		switch {
		case lead:
			c.flush(ctx)
		case done:
			return q.err
		default:
			<-q.wake
		}
	}
}

func signal(q *coalesced) {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// flush sends the statements waiting (up to max) as one round trip, wakes their callers, and
// hands the lead to the first statement still waiting, or gives it up.
func (c *coalescer) flush(ctx context.Context) {
	c.mu.Lock()
	n := min(len(c.queue), c.max)
	batch := make([]*coalesced, n)
	copy(batch, c.queue)
	clear(c.queue[:n]) // the array keeps no statement it no longer holds
	c.queue = c.queue[n:]
	if n > 1 {
		c.batches++
		c.coalescedStatements += n
	}
	c.mu.Unlock()
	if n > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coalesceTimeout)
		c.send(fctx, batch)
		cancel()
	}
	c.mu.Lock()
	for _, q := range batch {
		q.done = true
		signal(q)
	}
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		signal(next)
	} else {
		c.active--
	}
	c.mu.Unlock()
}

// send runs batch: one statement as it is, more as one pipelined batch; when PostgreSQL refused
// one of a batch's statements (so none committed), each again alone.
func (c *coalescer) send(ctx context.Context, batch []*coalesced) {
	if len(batch) == 1 && !c.async {
		c.alone(ctx, batch[0])
		return
	}
	b := &pgx.Batch{}
	if c.async {
		asyncCommit(b)
	}
	for _, q := range batch {
		b.Queue(q.sql, q.args...)
	}
	br := c.pool.SendBatch(ctx, b)
	var refused bool
	if c.async {
		_, err := br.Exec()
		refused = isServerError(err)
	}
	for _, q := range batch {
		if q.scan != nil {
			q.err = q.scan(br.QueryRow())
		} else {
			var t pgconn.CommandTag
			if t, q.err = br.Exec(); q.err == nil {
				q.err = q.tag(t)
			}
		}
		refused = refused || isServerError(q.err)
	}
	cerr := br.Close()
	refused = refused || isServerError(cerr)
	switch {
	case refused && len(batch) > 1:
		for _, q := range batch {
			c.send(ctx, []*coalesced{q})
		}
	case cerr != nil:
		// Whether the batch committed is not known: nobody may take its answer for one.
		for _, q := range batch {
			if q.err == nil || errors.Is(q.err, pgx.ErrNoRows) {
				q.err = cerr
			}
		}
	}
}

func (c *coalescer) alone(ctx context.Context, q *coalesced) {
	if q.scan != nil {
		q.err = q.scan(c.pool.QueryRow(ctx, q.sql, q.args...))
		return
	}
	t, err := c.pool.Exec(ctx, q.sql, q.args...)
	if err == nil {
		err = q.tag(t)
	}
	q.err = err
}

// isServerError reports whether PostgreSQL answered with an error, which aborts the batch's
// transaction: nothing of the batch was committed.
func isServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// stats returns the round trips that carried more than one statement and how many they carried.
func (c *coalescer) stats() (batches, statements int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches, c.coalescedStatements
}
