package watch

import (
	"testing"
	"time"
)

// TestSpreadPaceLeavesRoomForASlowPage: a first sweep's pages are a quarter of the interval
// apart in all when reading one is quick, twice a page's cost apart when that is more (the
// later sweeps keep the places, and need the room to catch up), and never spread over more
// than three quarters of the interval.
func TestSpreadPaceLeavesRoomForASlowPage(t *testing.T) {
	const iv = 30 * time.Second
	for _, c := range []struct {
		name    string
		cost    time.Duration
		members int
		perPage int
		want    time.Duration
	}{
		{"quick pages: a quarter of the interval", 100 * time.Microsecond, 100_000, 20, 1500 * time.Microsecond},
		{"slow pages: twice their cost", 1200 * time.Microsecond, 100_000, 20, 2400 * time.Microsecond},
		{"slower still: three quarters at most", 10 * time.Millisecond, 100_000, 20, 4500 * time.Microsecond},
		{"no cost measured yet", 0, 100_000, 20, 1500 * time.Microsecond},
		{"one page", time.Millisecond, 5, 20, iv / 4},
		{"an empty page", time.Millisecond, 5, 0, iv / 4 / 5},
	} {
		if got := spreadPace(c.cost, c.members, c.perPage, iv); got != c.want {
			t.Errorf("%s: pace %v, want %v", c.name, got, c.want)
		}
	}
}

// TestCoalesceWaitShrinksWithTheRate: the scheduler waits Coalesce for the reads due together
// while they come slowly, and only as long as 64 of them take to fall due once they come fast.
func TestCoalesceWaitShrinksWithTheRate(t *testing.T) {
	const longest = 50 * time.Millisecond
	for _, c := range []struct {
		rate float64
		want time.Duration
	}{
		{0, longest},                       // not measured yet
		{100, longest},                     // 64 reads take 640 ms
		{1000, longest},                    // 64 ms
		{1280, longest},                    // exactly 50 ms
		{6400, 10 * time.Millisecond},      // 64 reads in 10 ms
		{12800, 5 * time.Millisecond},      // in 5 ms
		{64_000_000, 1 * time.Microsecond}, // a wake a microsecond at most
	} {
		if got := coalesceWait(longest, c.rate); got != c.want {
			t.Errorf("%.0f reads a second: wait %v, want %v", c.rate, got, c.want)
		}
	}
}
