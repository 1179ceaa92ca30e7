package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/web"
)

func marker(kind string) string {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	return "mk" + kind + hex.EncodeToString(b)
}

var (
	hrefRE = regexp.MustCompile(`href="(/[^"#]*)"`)
	csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
)

// TestNoSecretLeaks runs the console's flows with marker secrets — an API token, server tokens
// from {env:} and {file:}, a session cookie, passwords typed at sign-in (right and wrong),
// answers to a server's questions in both eras, one of which the server echoes in its result —
// then scans the console's log, a pg_dump of every table, every console page a signed-in
// admin can reach by following links, and /metrics. None may hold a marker; the echoed answer
// must have been cut out of what is stored and shown.
func TestNoSecretLeaks(t *testing.T) {
	t.Parallel()
	bin, err := pgcluster.FindBinaries()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log strings.Builder
	w := &world{o: Options{Replicas: 1}.filled(), dir: t.TempDir(), metrics: true,
		serverTokens: [2]string{marker("envtoken"), marker("filetoken")}}
	defer w.close()
	if err := w.setup(ctx, &log); err != nil {
		t.Fatalf("setup: %v\n%s", err, log.String())
	}
	r := w.replicas[0]
	base := "http://" + r.addr
	tr := &traffic{w: w, accepted: map[string]int{}, rng: rand.New(rand.NewPCG(3, 4))} //nolint:gosec // test choices
	secrets := map[string]string{"API token": w.token, "server token from {env:}": w.serverTokens[0],
		"server token from {file:}": w.serverTokens[1]}

	// Questions in both eras, and one answer the server echoes back.
	var opIDs []string
	for i, wf := range []string{"questions-legacy", "questions-ext", "greeting"} {
		body, _ := json.Marshal(map[string]any{"workflow": wf, "tenant": "acme", "actor": "app:scan", "object_ref": "scan " + wf})
		st, b, _, err := tr.do(ctx, r.addr, http.MethodPost, "/api/v1/operations", fmt.Sprintf("soak-scan-%d", i), body)
		if err != nil || st != http.StatusAccepted {
			t.Fatalf("start %s: %d %v %s", wf, st, err, b)
		}
		var resp struct {
			OperationID string `json:"operation_id"`
		}
		_ = json.Unmarshal(b, &resp)
		opIDs = append(opIDs, resp.OperationID)
	}
	answered := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(answered) < 5 { // two questions each in both eras, and the greeting's name
		if time.Now().After(deadline) {
			t.Fatalf("answered %d of 5 questions within 60s: %v", len(answered), answered)
		}
		time.Sleep(200 * time.Millisecond)
		rows, err := w.pool.Query(ctx, `SELECT operation_id::text, input_key, fields::text FROM pending_inputs WHERE state = 'open'`)
		if err != nil {
			t.Fatal(err)
		}
		var open [][3]string
		for rows.Next() {
			var q [3]string
			if err := rows.Scan(&q[0], &q[1], &q[2]); err != nil {
				t.Fatal(err)
			}
			open = append(open, q)
		}
		rows.Close()
		for _, q := range open {
			if answered[q[0]+q[1]] {
				continue
			}
			var fields []struct{ Name, Type string }
			if err := json.Unmarshal([]byte(q[2]), &fields); err != nil {
				t.Fatal(err)
			}
			name := marker("answer" + strings.ReplaceAll(q[1], "-", ""))
			content := map[string]any{}
			for _, f := range fields {
				switch f.Type {
				case "boolean":
					content[f.Name] = true
				case "string":
					content[f.Name] = name
				}
			}
			if len(content) == 0 {
				t.Fatalf("question %s asks for nothing a marker fits: %s", q[1], q[2])
			}
			body, _ := json.Marshal(map[string]any{"key": q[1], "action": "accept", "content": content})
			st, b, _, err := tr.do(ctx, r.addr, http.MethodPost, "/api/v1/operations/"+q[0]+"/input", "", body)
			if err != nil || st != http.StatusAccepted {
				t.Fatalf("answer %s: %d %v %s", q[1], st, err, b)
			}
			answered[q[0]+q[1]] = true
			secrets["answer to "+q[1]+" of "+q[0]] = name
		}
	}
	var done int
	for deadline := time.Now().Add(60 * time.Second); done < len(opIDs); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d operations completed within 60s", done, len(opIDs))
		}
		if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE operation_id = ANY($1::uuid[]) AND result_state = 'fetched'`, opIDs).Scan(&done); err != nil {
			t.Fatal(err)
		}
	}
	var echoed string
	if err := w.pool.QueryRow(ctx, `SELECT preview FROM task_envelopes WHERE operation_id = $1`, opIDs[2]).Scan(&echoed); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(echoed, "Hello,") {
		t.Fatalf("the greeting's result %q does not hold the echoed answer's sentence: nothing was redacted", echoed)
	}

	// Passwords: the printed one, changed at first sign-in to a marker, a wrong one tried.
	as := auth.NewStore(w.pool, auth.Options{})
	_, printed, err := as.CreateAccount(ctx, audit.Actor{Name: "scan", Kind: audit.KindCLI}, auth.AllTenants,
		auth.NewAccount{Email: "scan@example.com", Role: auth.RoleAdmin, Scope: auth.AllTenants})
	if err != nil {
		t.Fatal(err)
	}
	chosen, wrong := marker("password"), marker("wrongpassword")
	secrets["printed password"], secrets["chosen password"], secrets["wrong password"] = printed, chosen, wrong
	signIn := func(password string) (*http.Client, string) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, Timeout: 20 * time.Second}
		page := get(t, ctx, c, base+"/signin")
		m := csrfRE.FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no sign-in form token")
		}
		return c, post(t, ctx, c, base+"/signin", url.Values{"csrf_token": {html.UnescapeString(m[1])}, "email": {"scan@example.com"}, "password": {password}})
	}
	if _, page := signIn(wrong); !strings.Contains(page, "signin") {
		t.Fatal("a wrong password was not refused")
	}
	c, page := signIn(printed)
	if !strings.Contains(page, "pw-new") { // the failed sign-ins are shown first, then the change form
		page = get(t, ctx, c, base+"/account/password")
	}
	m := csrfRE.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "pw-new") {
		t.Fatal("the printed password did not lead to the change form")
	}
	post(t, ctx, c, base+"/account/password", url.Values{"csrf_token": {html.UnescapeString(m[1])}, "current": {printed}, "new": {chosen}, "confirm": {chosen}})
	c, _ = signIn(chosen)
	u, _ := url.Parse(base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == web.SessionCookie {
			secrets["session cookie"] = ck.Value
		}
	}
	if secrets["session cookie"] == "" {
		t.Fatal("no session after signing in with the chosen password")
	}

	// Every page reachable by links from the overview and the operations' pages.
	pages := map[string]string{}
	queue := []string{"/", "/operations", "/inbox", "/reconcile", "/servers", "/workflows", "/audit"}
	for _, id := range opIDs {
		queue = append(queue, "/operations/"+id)
	}
	for len(queue) > 0 && len(pages) < 300 {
		p := queue[0]
		queue = queue[1:]
		if _, seen := pages[p]; seen || strings.Contains(p, "signout") || strings.HasPrefix(p, "/static/") || strings.Contains(p, "/events") {
			continue
		}
		body := get(t, ctx, c, base+p)
		pages[p] = body
		for _, m := range hrefRE.FindAllStringSubmatch(body, -1) {
			queue = append(queue, html.UnescapeString(m[1]))
		}
	}
	if len(pages) < 15 {
		t.Fatalf("only %d pages reached", len(pages))
	}
	for _, id := range opIDs {
		if !strings.Contains(pages["/operations/"+id], id) {
			t.Fatalf("the page of operation %s does not show it: the scan proves nothing", id)
		}
	}
	metrics := get(t, ctx, w.client, "http://"+r.metrics+"/metrics")
	if !strings.Contains(metrics, "go_goroutines") {
		t.Fatal("no metrics scraped")
	}
	dump, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "--data-only", "--dbname", w.dbURL).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if !bytes.Contains(dump, []byte("scan@example.com")) || !bytes.Contains(dump, []byte(opIDs[0])) {
		t.Fatal("the dump lacks the account or the operations: the scan proves nothing")
	}
	logs, err := os.ReadFile(r.log)
	if err != nil || !bytes.Contains(logs, []byte("operation")) {
		t.Fatalf("console log: %d bytes, %v", len(logs), err)
	}

	hay := map[string][]byte{"console log": logs, "pg_dump": dump, "/metrics": []byte(metrics)}
	for p, b := range pages {
		hay["page "+p] = []byte(b)
	}
	for what, s := range secrets {
		if len(s) < 12 {
			t.Fatalf("%s %q is too short to scan for", what, s)
		}
		for where, b := range hay {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("the %s is in the %s", what, where)
			}
		}
	}
	t.Logf("%d secrets scanned for in the console log (%d KiB), a pg_dump (%d KiB), /metrics and %d pages", len(secrets), len(logs)>>10, len(dump)>>10, len(pages))
}

func get(t *testing.T, ctx context.Context, c *http.Client, u string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if resp.StatusCode >= 500 {
		t.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	return string(b)
}

func post(t *testing.T, ctx context.Context, c *http.Client, u string, form url.Values) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	if resp.StatusCode >= 500 {
		t.Errorf("POST %s: %d", u, resp.StatusCode)
	}
	return string(b)
}
