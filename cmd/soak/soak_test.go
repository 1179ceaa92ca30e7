package main

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgcluster"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(receiverEnv); addr != "" {
		if err := runReceiverChild(addr, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var summaryRE = regexp.MustCompile(`(?m)^soak: operations (\d+) crashes (\d+) receiver_restarts (\d+) outage_s (\d+) lost (\d+) repeated (\d+) duplicates (\d+) takeover_p99_ms (\d+)$`)

// TestShortSoak runs the soak for 45 s of traffic (the outage shortened to 9 s; make soak runs
// 10 minutes with 30 s) and checks the invariants from its summary line.
func TestShortSoak(t *testing.T) {
	t.Parallel()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out strings.Builder
	err := run(ctx, []string{"-duration", "45s", "-drain", "2m"}, func(string) string { return "" }, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	m := summaryRE.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no summary line")
	}
	v := map[string]int{}
	for i, k := range []string{"operations", "crashes", "receiver_restarts", "outage_s", "lost", "repeated", "duplicates", "takeover_p99_ms"} {
		v[k], _ = strconv.Atoi(m[i+1])
	}
	if v["operations"] < 100 || v["crashes"] < 2 || v["receiver_restarts"] != 1 || v["outage_s"] < 8 {
		t.Errorf("the faults did not all happen: %v", v)
	}
	if v["lost"] != 0 || v["repeated"] != 0 || v["duplicates"] != 0 {
		t.Errorf("invariants broken: %v", v)
	}
	if !strings.Contains(out.String(), "route") || !strings.Contains(out.String(), "task:") || !strings.Contains(out.String(), "job:") {
		t.Error("the table does not show the routes")
	}
}

// TestTallyFindsRepeatsAndDuplicates feeds the tally what a faulty console would cause: a key
// called twice, an effect applied again by a second receiver process and an answer delivered
// twice.
func TestTallyFindsRepeatsAndDuplicates(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clean := []rcvState{{ToolCallsByKey: map[string]int{"a": 1, "b": 1}, Applied: []string{"a"}, Answers: map[string]int{"update t1 approval": 1}},
		{ToolCallsByKey: map[string]int{"c": 1}, Applied: []string{"c"}, LastGet: map[string]time.Time{"t1": now}}}
	var res Result
	_, last := tallyReceivers(clean, &res)
	if res.Repeated != 0 || res.Duplicates != 0 || res.AnswersTwice != 0 || res.ToolCalls != 3 || res.Effects != 2 || !last["t1"].Equal(now) {
		t.Fatalf("clean run tallied as %+v", res)
	}
	faulty := []rcvState{{ToolCallsByKey: map[string]int{"a": 2}, Applied: []string{"a"}, Answers: map[string]int{"response s1 7": 2}},
		{ToolCallsByKey: map[string]int{"a": 1}, Applied: []string{"a"}, EffectsRefused: 1}}
	res = Result{}
	tallyReceivers(faulty, &res)
	if res.Repeated != 1 || res.Duplicates != 2 || res.AnswersTwice != 1 {
		t.Fatalf("faulty run tallied as repeated %d duplicates %d answers twice %d", res.Repeated, res.Duplicates, res.AnswersTwice)
	}
	if f := res.failures(); len(f) == 0 {
		t.Fatal("a faulty run passed")
	}
}
