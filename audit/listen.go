package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Listen starts a goroutine that calls fn with every Change committed on ChangeChannel by any
// replica, until ctx ends; it reconnects after errors. The returned channel is closed once the
// first LISTEN is in place, so a caller can wait before making changes it expects to hear of.
// While it listens it also publishes the ledger's accumulated changes (PublishPending) every
// PublishInterval, so every console that shows live updates keeps them flowing.
func Listen(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, fn func(Change)) <-chan struct{} {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	go publish(ctx, pool, logger)
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		for ctx.Err() == nil {
			err := listenOnce(ctx, pool, fn, func() { once.Do(func() { close(ready) }) })
			if ctx.Err() != nil {
				return
			}
			logger.Warn("audit change listener restarting", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return ready
}

func listenOnce(ctx context.Context, pool *pgxpool.Pool, fn func(Change), listening func()) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen for changes: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+ChangeChannel); err != nil {
		return fmt.Errorf("listen for changes: %w", err)
	}
	listening()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			// The connection may still be listening; never hand it back to the pool like that.
			_ = conn.Conn().Close(context.Background())
			return fmt.Errorf("wait for changes: %w", err)
		}
		var c Change
		if err := json.Unmarshal([]byte(n.Payload), &c); err == nil {
			fn(c)
		}
	}
}
