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
