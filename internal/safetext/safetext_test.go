package safetext

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanReplacesNULAndInvalidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain":         "plain",
		"a\x00b":        "a\uFFFDb",
		"bad \xff byte": "bad \uFFFD byte",
	} {
		got, changed := Clean(in)
		if got != want || changed != (in != want) {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, changed, want)
		}
		if !Storable(got) {
			t.Errorf("Clean(%q) = %q is not storable", in, got)
		}
	}
}

func TestCleanJSONReplacesOnlyNULEscapesInStrings(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"k\u0000":1}`, `{"k\ufffd":1}`},
		{`{"a":"\\u0000"}`, `{"a":"\\u0000"}`}, // an escaped backslash, then text
		{`{"a":"\"\u0000"}`, `{"a":"\"\ufffd"}`},
		{`{"a":"\u00001"}`, `{"a":"\ufffd1"}`},
		{`{"a":"ok"}`, `{"a":"ok"}`},
	}
	for _, c := range cases {
		got, changed := CleanJSON([]byte(c.in))
		if string(got) != c.want || changed != (c.in != c.want) {
			t.Errorf("CleanJSON(%s) = %s, %v; want %s", c.in, got, changed, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("CleanJSON(%s) = %s is not JSON", c.in, got)
		}
	}
}

func TestCheckNamesTheField(t *testing.T) {
	if err := Check("reason", "fine"); err != nil {
		t.Fatal(err)
	}
	err := Check("reason", "a\x00")
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("Check = %v", err)
	}
	if err := CheckJSON("arguments", []byte(`{"x":"\u0000"}`)); err == nil || !strings.Contains(err.Error(), "arguments") {
		t.Fatalf("CheckJSON = %v", err)
	}
}

func TestCutNeverSplitsACharacter(t *testing.T) {
	s := strings.Repeat("é", 300) // two bytes each
	for n := 0; n < 20; n++ {
		got := CutPlain(s, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("CutPlain(%d) = %q (%d bytes)", n, got, len(got))
		}
		if c := Cut(s, n); !utf8.ValidString(c) || !strings.HasSuffix(c, "…") {
			t.Fatalf("Cut(%d) = %q", n, c)
		}
	}
	if Cut("short", 10) != "short" {
		t.Fatal("Cut changed a short string")
	}
}
