package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The receiver child records, as the server sees them, when each task was observed: every
// tasks/get of it, and every tasks/list page that lists it. Lateness is measured from there,
// the same way for the durable watcher and for WaitForTask: an observation is late by how long
// after the previous one plus the poll interval it came (0 when on time), and a task not
// observed again by the end of the window is late by the time since it fell due. Tasks that
// are not in the window's set are ignored.

// recorder is the receiver child's record of observations.
type recorder struct {
	mu       sync.Mutex
	last     map[string]time.Time // every task's last observation, kept across windows
	on       bool
	interval time.Duration
	start    time.Time
	tracked  map[string]bool
	late     []time.Duration
	obs      int64
	// gaps sums the time between consecutive observations of a task seen in the window, over
	// gapN of them.
	gaps time.Duration
	gapN int64
}

func newRecorder() *recorder { return &recorder{last: map[string]time.Time{}} }

// windowStart is what the bench posts to open a window.
type windowStart struct {
	IntervalMs int64    `json:"interval_ms"`
	IDs        []string `json:"ids"`
}

// windowFigures is what a window measured.
type windowFigures struct {
	Tasks         int     `json:"tasks"`
	Observations  int64   `json:"observations"`
	Seconds       float64 `json:"seconds"`
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
	// Amplification is the interval ÷ the mean time between consecutive observations of a task,
	// over every task of the window (in flight).
	Amplification float64 `json:"amplification"`
}

func (rc *recorder) observe(ids []string, at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, id := range ids {
		if rc.on && rc.tracked[id] {
			prev, ok := rc.last[id]
			if ok {
				rc.gaps += at.Sub(prev)
				rc.gapN++
			}
			if !ok || prev.Before(rc.start.Add(-rc.interval)) {
				prev = rc.start.Add(-rc.interval) // due at the window's start at the latest
			}
			rc.late = append(rc.late, max(0, at.Sub(prev)-rc.interval))
			rc.obs++
		}
		rc.last[id] = at
	}
}

func (rc *recorder) open(w windowStart) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.on, rc.interval, rc.start = true, time.Duration(w.IntervalMs)*time.Millisecond, time.Now()
	rc.tracked = make(map[string]bool, len(w.IDs))
	for _, id := range w.IDs {
		rc.tracked[id] = true
	}
	rc.late, rc.obs, rc.gaps, rc.gapN = nil, 0, 0, 0
}

func (rc *recorder) close() windowFigures {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := time.Now()
	late := rc.late
	for id := range rc.tracked {
		prev, ok := rc.last[id]
		if !ok || prev.Before(rc.start.Add(-rc.interval)) {
			prev = rc.start.Add(-rc.interval)
		}
		if open := now.Sub(prev) - rc.interval; open > 0 {
			late = append(late, open)
		}
	}
	el := now.Sub(rc.start)
	f := windowFigures{Tasks: len(rc.tracked), Observations: rc.obs, Seconds: round2(el.Seconds()),
		LatenessP50Ms: quantileMs(late, 0.5), LatenessP99Ms: quantileMs(late, 0.99)}
	// Amplification is the interval over the mean time between consecutive observations of a
	// task: 1 when each is observed once per interval, above when more often. (Observations ÷
	// tasks × seconds ÷ interval depends on where a window of a few intervals falls; tasks not
	// observed again show in the lateness.)
	if rc.gapN > 0 {
		mean := rc.gaps / time.Duration(rc.gapN)
		f.Amplification = math.Round(rc.interval.Seconds()/mean.Seconds()*1000) / 1000
	}
	rc.on, rc.late = false, nil
	return f
}

// handler wraps the receiver's MCP handler: it notes the tasks each tasks/get and tasks/list
// observes, and serves the window endpoints under /bench/.
func (rc *recorder) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bench/window/open":
			var ws windowStart
			if err := json.NewDecoder(r.Body).Decode(&ws); err != nil || ws.IntervalMs <= 0 {
				http.Error(w, "bad window", http.StatusBadRequest)
				return
			}
			rc.open(ws)
			return
		case "/bench/window/close":
			_ = json.NewEncoder(w).Encode(rc.close())
			return
		}
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		at := time.Now()
		switch {
		case bytes.Contains(body, []byte(`"tasks/get"`)):
			var m struct {
				Method string `json:"method"`
				Params struct {
					TaskID string `json:"taskId"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &m) == nil && m.Method == "tasks/get" {
				rc.observe([]string{m.Params.TaskID}, at)
			}
			next.ServeHTTP(w, r)
		case bytes.Contains(body, []byte(`"tasks/list"`)):
			cw := &captureWriter{ResponseWriter: w}
			next.ServeHTTP(cw, r)
			rc.observe(listedIDs(cw.buf.Bytes()), at)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// listedIDs are the task ids of a tasks/list answer (JSON, or one SSE event).
func listedIDs(b []byte) []string {
	if i := bytes.Index(b, []byte("data:")); i >= 0 && (len(b) == 0 || b[0] != '{') {
		b = b[i+5:]
		if j := bytes.IndexByte(b, '\n'); j >= 0 {
			b = b[:j]
		}
	}
	var m struct {
		Result struct {
			Tasks []struct {
				TaskID string `json:"taskId"`
			} `json:"tasks"`
		} `json:"result"`
	}
	if json.Unmarshal(bytes.TrimSpace(b), &m) != nil {
		return nil
	}
	ids := make([]string, 0, len(m.Result.Tasks))
	for _, t := range m.Result.Tasks {
		ids = append(ids, strings.TrimSpace(t.TaskID))
	}
	return ids
}

// captureWriter copies what it writes.
type captureWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (c *captureWriter) Write(p []byte) (int, error) {
	c.buf.Write(p)
	return c.ResponseWriter.Write(p)
}

func (c *captureWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// openWindowAt asks the receiver child at base to measure the given tasks at interval.
func (e *env) openWindowAt(base string, ids []string, interval time.Duration) error {
	b, _ := json.Marshal(windowStart{IntervalMs: interval.Milliseconds(), IDs: ids})
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/bench/window/open", bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &httpStatusError{resp.StatusCode}
	}
	return nil
}

// closeWindowAt ends the window of the receiver child at base and returns its figures.
func (e *env) closeWindowAt(base string) (windowFigures, error) {
	var f windowFigures
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/bench/window/close", nil)
	if err != nil {
		return f, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return f, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return f, &httpStatusError{resp.StatusCode}
	}
	return f, json.NewDecoder(resp.Body).Decode(&f)
}

type httpStatusError struct{ status int }

func (e *httpStatusError) Error() string { return http.StatusText(e.status) }
