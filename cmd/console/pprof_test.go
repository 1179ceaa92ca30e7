package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestAdminListenerServesProfilesOnLoopback(t *testing.T) {
	t.Parallel()
	url, stop, err := serveMetrics("127.0.0.1:0", false, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	res, err := http.Get(url + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "goroutine") {
		t.Fatalf("pprof index: status %d", res.StatusCode)
	}
}
