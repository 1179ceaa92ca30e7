package receiver

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Record statuses in the fake system of record.
const (
	RecordApplied    = "applied"
	RecordNotApplied = "not_applied"
)

// Record is the authoritative outcome of the effect behind one idempotency
// key, as served at GET /records/{key}.
type Record struct {
	Key       string     `json:"key"`
	Status    string     `json:"status"` // applied or not_applied
	AppliedAt *time.Time `json:"applied_at"`
	Effect    string     `json:"effect"`
	ReceiptID string     `json:"receipt_id,omitempty"`
}

// Records is the fake system of record: it applies an effect at most once per
// idempotency key, however often a request is delivered.
type Records struct {
	now   func() time.Time
	stats *counters
	mu    sync.Mutex
	recs  map[string]*Record
}

func newRecords(now func() time.Time, stats *counters) *Records {
	return &Records{now: now, stats: stats, recs: map[string]*Record{}}
}

// touch registers key as known and not applied, unless it is known.
func (rs *Records) touch(key, effect string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.recs[key]; !ok {
		rs.recs[key] = &Record{Key: key, Status: RecordNotApplied, Effect: effect}
	}
}

// Apply applies the effect for key unless it was applied already. It returns
// the record and whether this call applied it.
func (rs *Records) Apply(key, effect string) (Record, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rec, ok := rs.recs[key]
	if ok && rec.Status == RecordApplied {
		rs.stats.add(func(c *Counters) { c.EffectsRefused++ })
		return *rec, false
	}
	if !ok {
		rec = &Record{Key: key}
		rs.recs[key] = rec
	}
	at := rs.now().UTC()
	rec.Status, rec.AppliedAt, rec.Effect, rec.ReceiptID = RecordApplied, &at, effect, newID("rcpt_")
	rs.stats.add(func(c *Counters) { c.Effects++ })
	return *rec, true
}

// Get returns the record of key, if the key is known.
func (rs *Records) Get(key string) (Record, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rec, ok := rs.recs[key]
	if !ok {
		return Record{}, false
	}
	return *rec, true
}

func (r *Receiver) serveRecord(w http.ResponseWriter, req *http.Request) {
	rec, ok := r.records.Get(req.PathValue("key"))
	if !ok {
		writeJSON(w, http.StatusNotFound, obj{"error": "unknown key"})
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// Job statuses of the fake incumbent job API.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
)

// Job is one job of the fake incumbent job API.
type Job struct {
	ID        string    `json:"id"`
	Key       string    `json:"idempotency_key"`
	Status    string    `json:"status"`
	Effect    string    `json:"effect"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Error     string    `json:"error,omitempty"`
	ReceiptID string    `json:"receipt_id,omitempty"`
}

// jobRequest is the body of POST /jobs; every field is optional.
type jobRequest struct {
	Effect     string `json:"effect"`
	DurationMS int    `json:"duration_ms"`
	Outcome    string `json:"outcome"` // succeeded (default) or failed
}

type jobStore struct {
	r     *Receiver
	mu    sync.Mutex
	byID  map[string]*Job
	byKey map[string]*Job
}

func newJobStore(r *Receiver) *jobStore {
	return &jobStore{r: r, byID: map[string]*Job{}, byKey: map[string]*Job{}}
}

// serveJobCreate is POST /jobs: the same Idempotency-Key returns the same job
// (200) and never a second effect; a new key creates a job (201).
func (r *Receiver) serveJobCreate(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		writeJSON(w, http.StatusBadRequest, obj{"error": "Idempotency-Key header required"})
		return
	}
	var jr jobRequest
	if req.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<20)).Decode(&jr); err != nil {
			writeJSON(w, http.StatusBadRequest, obj{"error": "invalid JSON body"})
			return
		}
	}
	if jr.Effect == "" {
		jr.Effect = "job"
	}
	js := r.jobs
	js.mu.Lock()
	if j, ok := js.byKey[key]; ok {
		cp := *j
		js.mu.Unlock()
		writeJSON(w, http.StatusOK, cp)
		return
	}
	now := r.cfg.Now().UTC()
	j := &Job{ID: newID("job_"), Key: key, Status: JobQueued, Effect: jr.Effect, CreatedAt: now, UpdatedAt: now}
	js.byID[j.ID], js.byKey[key] = j, j
	cp := *j
	js.mu.Unlock()
	r.records.touch(key, jr.Effect)
	r.goBackground(func() { js.run(j, jr) })
	writeJSON(w, http.StatusCreated, cp)
}

func (js *jobStore) set(j *Job, f func(*Job)) {
	js.mu.Lock()
	defer js.mu.Unlock()
	f(j)
	j.UpdatedAt = js.r.cfg.Now().UTC()
}

func (js *jobStore) run(j *Job, jr jobRequest) {
	js.set(j, func(j *Job) { j.Status = JobRunning })
	if err := sleep(js.r.ctx, time.Duration(jr.DurationMS)*time.Millisecond); err != nil {
		js.set(j, func(j *Job) { j.Status, j.Error = JobFailed, "receiver stopped" })
		return
	}
	if jr.Outcome == JobFailed {
		js.set(j, func(j *Job) { j.Status, j.Error = JobFailed, "job failed as requested" })
		return
	}
	rec, _ := js.r.records.Apply(j.Key, jr.Effect)
	js.set(j, func(j *Job) { j.Status, j.ReceiptID = JobSucceeded, rec.ReceiptID })
}

func (r *Receiver) serveJobGet(w http.ResponseWriter, req *http.Request) {
	r.jobs.mu.Lock()
	j, ok := r.jobs.byID[req.PathValue("id")]
	var cp Job
	if ok {
		cp = *j
	}
	r.jobs.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, obj{"error": "unknown job"})
		return
	}
	writeJSON(w, http.StatusOK, cp)
}

// WaitJob blocks until the job is succeeded or failed, or ctx ends, and
// returns it. Tests use it instead of polling GET /jobs/{id}.
func (r *Receiver) WaitJob(ctx context.Context, id string) (Job, error) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		r.jobs.mu.Lock()
		j, ok := r.jobs.byID[id]
		var cp Job
		if ok {
			cp = *j
		}
		r.jobs.mu.Unlock()
		if ok && (cp.Status == JobSucceeded || cp.Status == JobFailed) {
			return cp, nil
		}
		select {
		case <-ctx.Done():
			return cp, ctx.Err()
		case <-t.C:
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
