// Package lifecycle gives Taskgate's background services their shared Start and Stop: one
// goroutine while the service runs, a second Start refused, Stop idempotent and waiting for the
// pass in progress. A service embeds a Loop and keeps only its own loop body.
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is returned by Start while the loop is running.
var ErrStarted = errors.New("already started")

// Loop runs one background goroutine at a time. The zero value is stopped.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a goroutine until Stop. run's context keeps ctx's values but not its
// cancellation: a service outlives the request or start-up context it was started from and ends
// only through Stop, so a shutdown can be orderly.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for run to return. It reports whether the loop was
// running; calling it again, or on a stopped loop, does nothing.
func (l *Loop) Stop() bool {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel = nil
	l.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	<-done
	return true
}
