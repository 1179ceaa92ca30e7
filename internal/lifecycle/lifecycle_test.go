package lifecycle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskgate/taskgate/internal/lifecycle"
)

type key struct{}

func TestLoopStartStop(t *testing.T) {
	t.Parallel()
	var l lifecycle.Loop
	if l.Stop() {
		t.Fatal("a stopped loop reported running")
	}
	started := make(chan struct{})
	finished := make(chan struct{})
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	err := l.Start(parent, func(ctx context.Context) {
		if ctx.Value(key{}) != "v" {
			t.Error("run lost the start context's values")
		}
		close(started)
		<-ctx.Done()
		close(finished)
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := l.Start(context.Background(), func(context.Context) {}); !errors.Is(err, lifecycle.ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	cancelParent() // the loop ends only through Stop
	select {
	case <-finished:
		t.Fatal("cancelling the start context stopped the loop")
	default:
	}
	if !l.Stop() {
		t.Fatal("Stop did not find the loop running")
	}
	select {
	case <-finished:
	default:
		t.Fatal("Stop returned before run did")
	}
	if l.Stop() {
		t.Fatal("a second Stop reported running")
	}
	// A stopped loop can start again.
	ran := make(chan struct{})
	if err := l.Start(context.Background(), func(context.Context) { close(ran) }); err != nil {
		t.Fatal(err)
	}
	<-ran
	l.Stop()
}
