package gates_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/receiver"
)

// TestLoadSuiteWaitsOutAShortExtensionTTLAndHonoursBackpressure: an extension server that
// sets a 2s ttlMs has its task gone (-32602) after it; the backpressure case passes and the
// concurrent case reports its polling amplification.
func TestLoadSuiteWaitsOutAShortExtensionTTLAndHonoursBackpressure(t *testing.T) {
	t.Parallel()
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasExtension, DefaultPollInterval: 30 * time.Millisecond, DefaultTTL: 2 * time.Second,
		MaxTTL: time.Minute, Tokens: map[string]receiver.Identity{"tok-acme": {Tenant: "acme"}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); rcv.Close() })
	tg := referenceTarget(rcv, "http://"+ln.Addr().String()+"/mcp")
	tg.SecondToken = ""
	run := (&gates.Runner{Build: "test", CaseTimeout: 20 * time.Second}).Run(context.Background(), tg, []gates.Suite{gates.SuiteLoad})
	t.Log("\n" + summary(run))
	want := map[string]bool{"concurrent": false, "backpressure": false, "cleanup-after-ttl": false}
	for _, c := range run.Cases {
		if _, ok := want[c.Name]; !ok {
			continue
		}
		if c.Verdict != gates.Pass {
			t.Errorf("%s: %s — %s", c.Name, c.Verdict, c.Reason)
		}
		want[c.Name] = true
		switch c.Name {
		case "cleanup-after-ttl":
			if c.Evidence.Timings["ttl"] != 2000 {
				t.Errorf("cleanup timings %v, want the server's 2s ttl", c.Evidence.Timings)
			}
		case "backpressure":
			if c.Evidence.Timings["next_read_after_429"] < 1000 {
				t.Errorf("backpressure timings %v: a read inside the 1s Retry-After", c.Evidence.Timings)
			}
		case "concurrent":
			if !hasNotePrefix(c, "polling amplification") {
				t.Errorf("concurrent notes %q: no polling amplification", c.Evidence.Notes)
			}
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("case %s not run", n)
		}
	}
}

func hasNotePrefix(c gates.Case, prefix string) bool {
	for _, n := range c.Evidence.Notes {
		if len(n) >= len(prefix) && n[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// TestAnAnswerAcceptedAndDroppedIsADeviation: between the gate and an extension server a proxy
// acknowledges every tasks/update without passing it on, as a server that accepts and
// silently drops an answer would; the input case fails and the fingerprint says so.
func TestAnAnswerAcceptedAndDroppedIsADeviation(t *testing.T) {
	t.Parallel()
	rcv, url := startReceiver(t, receiver.ErasExtension)
	front, err := faultproxy.New(url)
	if err != nil {
		t.Fatal(err)
	}
	furl, err := front.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Close() })
	front.Add(faultproxy.Rule{Action: faultproxy.Swallow, Method: "tasks/update", Times: -1})
	tg := referenceTarget(rcv, furl)
	run := (&gates.Runner{Build: "test", CaseTimeout: 20 * time.Second}).Run(context.Background(), tg, []gates.Suite{gates.SuiteContract})
	t.Log("\n" + summary(run))
	wantDeviation(t, run, gates.DevUpdateDropsAnswer, "accepted and dropped")
	wantCase(t, run, "input", gates.Fail, "still asks for input")
	if front.Count("request", "tasks/update") == 0 {
		t.Fatal("no answer was sent: the test proves nothing")
	}
}
