package killswitch

import (
	"testing"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// BenchmarkKillSwitchPropagation toggles the switch 50 times with three replicas on one
// database and reports the p50 and p99 time until every replica refuses (or allows) new starts.
func BenchmarkKillSwitchPropagation(b *testing.B) {
	pool := pgtest.New(b)
	for b.Loop() {
		p, err := MeasurePropagation(b.Context(), pool, 3, 50)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(p.Quantile(0.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p.Quantile(0.99).Microseconds())/1000, "p99-ms")
	}
}

func TestMeasurePropagation(t *testing.T) {
	t.Parallel()
	p, err := MeasurePropagation(ctxT(t), pgtest.New(t), 3, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Samples) != 6 || p.Quantile(0.99) <= 0 || p.Quantile(0.5) > p.Quantile(0.99) {
		t.Fatalf("%+v", p)
	}
}
