package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// The console's address serves no metrics to anonymous callers; they are on a listen address
// of their own, and carry the HTTP metrics.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	t.Parallel()
	c := startConsole(t, "--data-dir", dataDir(t), "--metrics-addr", "127.0.0.1:0")
	m := c.out.waitFor(t, regexp.MustCompile(`metrics:\s+(http://127\.0\.0\.1:\d+)/metrics`), c.done)
	if status, _ := get(t, c.url+"/metrics"); status != http.StatusNotFound {
		t.Errorf("/metrics on the console's address: status %d, want 404", status)
	}
	get(t, c.url+"/healthz")
	status, body := get(t, m+"/metrics")
	if status != http.StatusOK || !strings.Contains(body, "taskgate_http_requests_total") {
		t.Errorf("/metrics on the metrics address: status %d", status)
	}
}
