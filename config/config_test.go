package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/examples"
)

func TestExamplePolicyIsValid(t *testing.T) {
	t.Parallel()
	c, err := config.Parse(examples.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Workflows) == 0 || len(c.Servers) == 0 {
		t.Fatalf("example has %d workflows and %d servers", len(c.Workflows), len(c.Servers))
	}
	routes := map[string]bool{}
	for _, w := range c.Workflows {
		routes[w.Fallback.Kind] = true
		if w.Budgets.Create.Retries != 0 || w.Budgets.Status.Timeout.Duration == 0 {
			t.Errorf("workflow %s: budgets not defaulted: %+v", w.Name, w.Budgets)
		}
	}
	for _, k := range []string{config.FallbackSync, config.FallbackJobAPI, config.FallbackHandoff, config.FallbackReject} {
		if !routes[k] {
			t.Errorf("example policy has no workflow whose fallback is %s", k)
		}
	}
	if len(c.SHA256) != 64 {
		t.Errorf("sha256 %q", c.SHA256)
	}
}

const base = `servers:
  - name: s1
    url: http://127.0.0.1:9/mcp
owners:
  - name: team
workflows:
  - name: wf
    server: s1
    tool: t
    effect: effectful
    task_use: required
    fallback: {kind: reject}
    owners: [team]
`

func TestErrorsNameFieldAndLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		edit      func(string) string
		wantField string
		wantLine  int
		wantMsg   string
	}{
		{"unknown server", func(s string) string { return strings.Replace(s, "server: s1", "server: nope", 1) },
			"workflows[0].server", 8, `server "nope" is not in the servers list`},
		{"bad effect", func(s string) string { return strings.Replace(s, "effect: effectful", "effect: risky", 1) },
			"workflows[0].effect", 10, "want read_only"},
		{"sync without max duration", func(s string) string { return strings.Replace(s, "{kind: reject}", "{kind: sync}", 1) },
			"workflows[0].fallback.max_duration", 12, "needs max_duration"},
		{"long sync for a required workflow", func(s string) string {
			return strings.Replace(s, "{kind: reject}", "{kind: sync, max_duration: 10m}", 1)
		},
			"workflows[0].fallback.max_duration", 12, "only for short calls"},
		{"unknown owner", func(s string) string { return strings.Replace(s, "owners: [team]", "owners: [ghost]", 1) },
			"workflows[0].owners[0]", 13, `owner "ghost"`},
		{"bad url", func(s string) string { return strings.Replace(s, "http://127.0.0.1:9/mcp", "ftp://x", 1) },
			"servers[0].url", 3, "want an http(s)"},
		{"create retries", func(s string) string { return s + "    budgets: {create: {timeout: 5s, retries: 2}}\n" },
			"workflows[0].budgets.create.retries", 14, "never retries"},
		{"duplicate workflow", func(s string) string {
			return s + "  - name: wf\n    server: s1\n    tool: t\n    effect: read_only\n    task_use: never\n    fallback: {kind: reject}\n    owners: [team]\n"
		}, "workflows[1].name", 14, "defined twice"},
		{"bad stage", func(s string) string { return s + "    stage: everywhere\n" },
			"workflows[0].stage", 14, "want off, shadow, canary or full"},
		{"canary percent over 100", func(s string) string { return s + "    stage: canary\n    canary_percent: 101\n" },
			"workflows[0].canary_percent", 15, "want 0 to 100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.edit(base)))
			var es config.Errors
			if !errors.As(err, &es) {
				t.Fatalf("want validation errors, got %v", err)
			}
			for _, e := range es {
				if e.Field == tc.wantField {
					if e.Line != tc.wantLine {
						t.Errorf("line = %d, want %d (%v)", e.Line, tc.wantLine, e)
					}
					if !strings.Contains(e.Msg, tc.wantMsg) {
						t.Errorf("message %q lacks %q", e.Msg, tc.wantMsg)
					}
					return
				}
			}
			t.Fatalf("no error for %s in %v", tc.wantField, err)
		})
	}
}

func TestInlineSecretRefused(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(base, "url: http://127.0.0.1:9/mcp", "url: http://127.0.0.1:9/mcp\n    token: s3cr3t-value", 1)
	_, err := config.Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "never written inline") {
		t.Fatalf("inline secret accepted or unclear error: %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t-value") {
		t.Fatalf("error repeats the secret: %v", err)
	}
	if !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("error does not name the line: %v", err)
	}
}

func TestSecretResolve(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(base, "url: http://127.0.0.1:9/mcp", "url: http://127.0.0.1:9/mcp\n    token: {env: TG_TEST_TOKEN}", 1)
	c, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tok := c.Servers[0].Token
	v, err := tok.Resolve(func(k string) string { return map[string]string{"TG_TEST_TOKEN": "abc"}[k] })
	if err != nil || v != "abc" {
		t.Fatalf("resolve = %q, %v", v, err)
	}
	if _, err := tok.Resolve(func(string) string { return "" }); err == nil {
		t.Fatal("unset variable resolved")
	}
	if tok.String() != "env:TG_TEST_TOKEN" {
		t.Fatalf("String() = %q", tok.String())
	}
}

func TestUnknownFieldRefused(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(base + "    colour: blue\n"))
	if err == nil || !strings.Contains(err.Error(), "colour") || !strings.Contains(err.Error(), "line 14") {
		t.Fatalf("unknown field: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(examples.Policy)
	f.Add([]byte(base))
	f.Add([]byte("servers: [{name: a, url: builtin:demo}]"))
	f.Add([]byte("workflows: {a: 1}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b)
		if err == nil {
			// A config that validates must name known servers and owners in each workflow.
			for _, w := range c.Workflows {
				if _, ok := c.Server(w.Server); !ok {
					t.Fatalf("valid config with unknown server %q", w.Server)
				}
			}
		}
	})
}
