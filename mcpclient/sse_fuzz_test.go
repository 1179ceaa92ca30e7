package mcpclient

import (
	"bytes"
	"errors"
	"testing"
	"testing/iotest"
)

// FuzzReadSSE reads arbitrary bytes as an event stream, whole and a byte at a time: both
// reads give the same events and the same error, and no event is over the line limit.
func FuzzReadSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"event: message\r\nid: 7\r\ndata: a\r\ndata: b\r\n\r\n: comment\n\ndata:c",
		"retry: 10\ndata:\n\ndata: x\n",
		"data: " + string(bytes.Repeat([]byte("y"), 300)) + "\n\n",
		"\n\n\ndata: \xff\xfe\x00\n\n",
	} {
		f.Add([]byte(s))
	}
	const maxLine = 256
	read := func(b []byte, oneByte bool) ([]string, error) {
		var evs []string
		r := bytes.NewReader(b)
		var err error
		onData := func(d []byte) bool {
			if len(d) > maxLine {
				panic("an event over the line limit was delivered")
			}
			evs = append(evs, string(d))
			return false
		}
		if oneByte {
			err = readSSE(iotest.OneByteReader(r), maxLine, onData)
		} else {
			err = readSSE(r, maxLine, onData)
		}
		return evs, err
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		whole, err1 := read(b, false)
		trickled, err2 := read(b, true)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && !errors.Is(err1, ErrResultTooLarge)) {
			t.Fatalf("errors differ or are unexpected: whole %v, a byte at a time %v", err1, err2)
		}
		if err1 == nil && len(whole) != len(trickled) {
			t.Fatalf("%d events whole, %d a byte at a time", len(whole), len(trickled))
		}
		for i := range whole {
			if err1 == nil && whole[i] != trickled[i] {
				t.Fatalf("event %d differs: %q vs %q", i, whole[i], trickled[i])
			}
		}
	})
}
