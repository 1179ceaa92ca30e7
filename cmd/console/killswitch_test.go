package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgcluster"
)

// TestKillSwitchReachesTheOtherConsole runs two consoles on one database, engages a switch
// with "console kill engage", and reads a console's answer for the next start of that workflow (through its OFREP endpoint, which answers from the same in-memory
// cache as the start path) until it refuses: within a second.
func TestKillSwitchReachesTheOtherConsole(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	ctx := context.Background()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "external")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Remove() })
	dbURL := cl.URL("postgres")
	env := func(k string) string {
		if k == "USER" {
			return "ops"
		}
		return ""
	}
	cmd := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(ctx, append(args, "--database-url", dbURL, "--data-dir", dir), env, &out); err != nil {
			t.Fatalf("console %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	startConsole(t, "--database-url", dbURL, "--data-dir", filepath.Join(dir, "a"))
	b := startConsole(t, "--database-url", dbURL, "--data-dir", filepath.Join(dir, "b"))
	m := regexp.MustCompile(`(tg_[0-9a-f]{8}_\S+)`).FindStringSubmatch(cmd("tokens", "create", "--name", "app", "--tenants", "acme"))
	if m == nil {
		t.Fatal("no token")
	}
	allowed := func() bool {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"context": map[string]any{"targetingKey": "acme", "workflow": "refund", "server": "demo"}})
		req, _ := http.NewRequest(http.MethodPost, b.url+"/ofrep/v1/evaluate/flags/new-task-starts", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+m[1])
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct {
			Value   any    `json:"value"`
			Variant string `json:"variant"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
			t.Fatalf("OFREP: %d %v", res.StatusCode, err)
		}
		return out.Value == true
	}
	if !allowed() {
		t.Fatal("starts refused before any switch")
	}
	cmd("kill", "engage", "--workflow", "refund", "--reason", "incident")
	engaged := time.Now()
	for allowed() {
		if time.Since(engaged) > time.Second {
			t.Fatal("the other console still allows refund a second after the switch")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the other console refused %s after the switch", time.Since(engaged))
}
