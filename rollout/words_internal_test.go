package rollout

import (
	"testing"
	"time"
)

func TestDurationWords(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{300 * time.Millisecond: "300 ms", 2 * time.Second: "2 s", 1500 * time.Millisecond: "1.5 s",
		30 * time.Minute: "30 min", 90 * time.Second: "1 min 30 s", time.Hour: "1 h", 90 * time.Minute: "1 h 30 min"} {
		if got := durationWords(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
