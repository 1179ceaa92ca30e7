package main

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestUsersAndTokensCommands drives the account and token commands against a private cluster.
func TestUsersAndTokensCommands(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	console := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(args, "--data-dir", dir), func(k string) string {
			if k == "USER" {
				return "ops"
			}
			return ""
		}, &out)
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := console(args...)
		if err != nil {
			t.Fatalf("console %v: %v\n%s", args, err, out)
		}
		return out
	}
	out := must("users", "add", "--email", "ann@example.com", "--role", "support", "--tenants", "acme,globex")
	if !regexp.MustCompile(`one-time password: [A-Z2-7]{5}(-[A-Z2-7]{5}){4}`).MatchString(out) {
		t.Errorf("users add printed no one-time password:\n%s", out)
	}
	if _, err := console("users", "add", "--email", "ann@example.com", "--role", "viewer", "--tenants", "all"); err == nil {
		t.Error("a second account with the same email was accepted")
	}
	if _, err := console("users", "add", "--email", "bob@example.com", "--role", "root", "--tenants", "all"); err == nil {
		t.Error("an unknown role was accepted")
	}
	if out := must("users", "list"); !regexp.MustCompile(`ann@example.com\s+support\s+acme,globex\s+enabled`).MatchString(out) {
		t.Errorf("users list:\n%s", out)
	}
	if out := must("users", "reset-password", "ann@example.com"); !strings.Contains(out, "one-time password for ann@example.com") {
		t.Errorf("reset-password:\n%s", out)
	}
	must("users", "disable", "ann@example.com")
	if out := must("users", "list"); !strings.Contains(out, "disabled") {
		t.Errorf("after disable:\n%s", out)
	}
	out = must("tokens", "create", "--name", "billing", "--tenants", "acme")
	m := regexp.MustCompile(`token \(shown once\): (tg_([0-9a-f]{8})_\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("tokens create:\n%s", out)
	}
	if out := must("tokens", "list"); !strings.Contains(out, "tg_"+m[2]) || strings.Contains(out, m[1]) || !strings.Contains(out, "active") {
		t.Errorf("tokens list must show the prefix and never the secret:\n%s", out)
	}
	must("tokens", "revoke", "tg_"+m[2])
	if out := must("tokens", "list"); !strings.Contains(out, "revoked") {
		t.Errorf("after revoke:\n%s", out)
	}
	if _, err := console("tokens", "create", "--name", "x", "--tenants", "all"); err == nil {
		t.Error("a token for every tenant was accepted")
	}
}

// TestDemoAccountsPrintedAndUsable: the embedded demo prints one account per role with a
// one-time password, and the admin's signs in.
func TestDemoAccountsPrintedAndUsable(t *testing.T) {
	t.Parallel()
	c := startConsole(t, "--data-dir", dataDir(t))
	c.out.waitFor(t, regexp.MustCompile(`(stop with Ctrl-C)`), c.done)
	banner := c.out.String()
	for _, role := range []string{"viewer", "operator", "support", "admin"} {
		if !regexp.MustCompile(role + `@demo\s+` + role + `\s+all\s+\S+`).MatchString(banner) {
			t.Errorf("banner lacks the %s demo account:\n%s", role, banner)
		}
	}
	if !regexp.MustCompile(`acme-viewer@demo\s+viewer\s+acme\s`).MatchString(banner) {
		t.Errorf("banner lacks the tenant-scoped viewer:\n%s", banner)
	}
	pw := regexp.MustCompile(`admin@demo\s+admin\s+all\s+(\S+)`).FindStringSubmatch(banner)[1]
	jar := &cookieJar{}
	client := &http.Client{Jar: jar}
	res, err := client.Get(c.url + "/signin")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	form := url.Values{"email": {"admin@demo"}, "password": {pw}, "csrf_token": {jar.value("tg_signin")}}
	res, err = client.PostForm(c.url+"/signin", form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/" {
		t.Fatalf("demo admin sign-in ended at %s with %d", res.Request.URL, res.StatusCode)
	}
}

// cookieJar is a minimal jar for one loopback host.
type cookieJar struct{ cookies map[string]*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	if j.cookies == nil {
		j.cookies = map[string]*http.Cookie{}
	}
	for _, c := range cs {
		if c.MaxAge < 0 {
			delete(j.cookies, c.Name)
			continue
		}
		j.cookies[c.Name] = c
	}
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie {
	var out []*http.Cookie
	for _, c := range j.cookies {
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	return out
}

func (j *cookieJar) value(name string) string {
	if c, ok := j.cookies[name]; ok {
		return c.Value
	}
	return ""
}
