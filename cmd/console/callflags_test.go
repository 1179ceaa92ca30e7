package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/receiver"
)

// pollReceiver serves a receiver suggesting the given pollInterval.
func pollReceiver(t *testing.T, eras receiver.Eras, poll time.Duration) (*receiver.Receiver, string) {
	t.Helper()
	// No purge during the test: a task outliving its ttl stays readable.
	r := receiver.New(receiver.Config{Eras: eras, DefaultPollInterval: poll, MaxPollInterval: poll, PurgeInterval: time.Hour})
	ts := httptest.NewServer(r.Handler())
	t.Cleanup(func() {
		ts.Close()
		r.Close()
	})
	return r, ts.URL + "/mcp"
}

// lastJSON decodes the final JSON object console call printed.
func lastJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	i := strings.LastIndex(out, "\n{")
	if i < 0 {
		t.Fatalf("no JSON in output:\n%s", out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out[i+1:]), &m); err != nil {
		t.Fatalf("decode output JSON: %v\n%s", err, out)
	}
	return m
}

// TestCallHonoursPollIntervalAndPrintsMilliseconds: a 3 s pollInterval is
// followed (not replaced by 250 ms), and ttl and pollInterval print in ms.
func TestCallHonoursPollIntervalAndPrintsMilliseconds(t *testing.T) {
	t.Parallel()
	r, url := pollReceiver(t, receiver.ErasExtension, 3*time.Second)
	var out bytes.Buffer
	if err := runCall(testCtx(t), []string{url, receiver.ToolWorkOptional, "--task", "--args", `{"duration_ms":3500}`}, &out); err != nil {
		t.Fatalf("call: %v\n%s", err, out.String())
	}
	if n := r.Counters().Methods["tasks/get"]; n < 1 || n > 3 {
		t.Errorf("%d tasks/get for a 3.5 s task at a 3 s pollInterval, want 1–3", n)
	}
	task, _ := lastJSON(t, out.String())["task"].(map[string]any)
	if task["pollInterval"] != float64(3000) || task["ttl"] != float64(time.Hour.Milliseconds()) {
		t.Errorf("task printed as %v, want pollInterval 3000 and ttl %d (milliseconds)", task, time.Hour.Milliseconds())
	}
}

// TestCallTimeout: --timeout bounds the whole call and fails with a clear
// message; without it the requested ttl is the deadline.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	_, url := pollReceiver(t, receiver.ErasBoth, 50*time.Millisecond)
	for name, args := range map[string][]string{
		"explicit timeout": {url, receiver.ToolWorkOptional, "--task", "--args", `{"outcome":"hang"}`, "--timeout", "700ms"},
		"ttl as deadline":  {url, receiver.ToolWorkOptional, "--task", "--args", `{"outcome":"hang"}`, "--ttl", "700", "--era", "legacy"},
		"plain call":       {url, receiver.ToolWorkOptional, "--args", `{"outcome":"hang"}`, "--timeout", "700ms"},
	} {
		start := time.Now()
		var out bytes.Buffer
		err := runCall(testCtx(t), args, &out)
		if err == nil || !errors.Is(err, errCallDeadline) || !strings.Contains(err.Error(), "no outcome within --timeout 700ms") {
			t.Errorf("%s: err %v, want the deadline message\n%s", name, err, out.String())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: returned after %s", name, d)
		}
	}
	var out bytes.Buffer
	if err := runCall(testCtx(t), []string{url, receiver.ToolGreet, "--timeout", "-1s"}, &out); err == nil {
		t.Error("a negative --timeout was accepted")
	}
}
