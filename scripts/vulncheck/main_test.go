package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stream is govulncheck's JSON for one called vulnerability (two traces), one only imported
// and one in the standard library.
const stream = `{"config":{"scanner_version":"v1.9.0","db":"file:///db"}}
{"osv":{"id":"GO-1","summary":"redirect leak"}}
{"osv":{"id":"GO-2","summary":"std crash"}}
{"osv":{"id":"GO-3","summary":"imported only"}}
{"finding":{"osv":"GO-1","trace":[{"module":"example.com/m","version":"v1.2.1"}]}}
{"finding":{"osv":"GO-1","trace":[{"module":"example.com/m","version":"v1.2.1","package":"example.com/m/t","function":"New"},{"module":"app","package":"app/c","function":"dial","position":{"filename":"c/dial.go","line":3}}]}}
{"finding":{"osv":"GO-1","trace":[{"module":"example.com/m","version":"v1.2.1","package":"example.com/m/t","function":"Send","receiver":"*T"},{"module":"app","package":"app/c","function":"call"}]}}
{"finding":{"osv":"GO-2","fixed_version":"v1.26.10","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Serve"},{"module":"app","package":"app/r","function":"Serve"}]}}
{"finding":{"osv":"GO-3","trace":[{"module":"example.com/n","version":"v0.1.0","package":"example.com/n"}]}}
`

func TestCalledVulnerabilitiesFailUnlessAccepted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	list := filepath.Join(dir, "accepted")
	write := func(s string) {
		if err := os.WriteFile(list, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	n, err := run(strings.NewReader(stream), &out, "")
	if err != nil || n != 2 {
		t.Fatalf("nothing accepted: %d failing, %v\n%s", n, err, out.String())
	}
	if !strings.Contains(out.String(), "app/c.dial (c/dial.go:3) → example.com/m/t.New") || !strings.Contains(out.String(), "example.com/m/t.T.Send") ||
		!strings.Contains(out.String(), "2 called vulnerabilities (2 not accepted); 1 more in code that is not called") {
		t.Errorf("report:\n%s", out.String())
	}
	write("# reviewed\nGO-1 the client refuses redirects\nGO-9 fixed long ago\n")
	out.Reset()
	n, err = run(strings.NewReader(stream), &out, list)
	if err != nil || n != 1 || !strings.Contains(out.String(), "accepted: the client refuses redirects") ||
		!strings.Contains(out.String(), "GO-9 is accepted but no longer called") {
		t.Fatalf("GO-1 accepted: %d failing, %v\n%s", n, err, out.String())
	}
	write("GO-2\n")
	if _, err := run(strings.NewReader(stream), &out, list); err == nil {
		t.Error("an id without a reason was accepted")
	}
	if _, err := run(strings.NewReader(""), &out, ""); err == nil {
		t.Error("an empty input passed: a scan that never ran must fail")
	}
}
