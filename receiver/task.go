package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Status is a task status, the same five values in both eras.
type Status string

// Task statuses.
const (
	StatusWorking       Status = "working"
	StatusInputRequired Status = "input_required"
	StatusCompleted     Status = "completed"
	StatusFailed        Status = "failed"
	StatusCancelled     Status = "cancelled"
)

// Terminal reports whether s is completed, failed or cancelled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// ValidTransition reports whether a task may go from one status to another:
// working ⇄ input_required, either to a terminal status; terminal is final.
func ValidTransition(from, to Status) bool {
	switch from {
	case StatusWorking:
		return to == StatusInputRequired || to.Terminal()
	case StatusInputRequired:
		return to == StatusWorking || to.Terminal()
	}
	return false
}

// era tags the wire a task was created on.
type era int

const (
	eraLegacy era = iota
	eraExtension
)

// inputRequest is one request for input a task waits on.
type inputRequest struct {
	Key    string
	Method string // elicitation/create
	Params obj
}

// pendingInput is an input request of a task and its answer.
type pendingInput struct {
	req      inputRequest
	answered bool
	answer   json.RawMessage
	sentOn   outbound // legacy: the stream it was last sent on
}

// task is one task. Fields below mu are guarded by the store's mutex.
type task struct {
	id        string
	seq       uint64
	tenant    string
	actor     string
	era       era
	tool      string
	sessionID string // legacy: session to notify
	createdAt time.Time
	ttl       time.Duration // 0 = unlimited
	poll      time.Duration

	status        Status
	statusMessage string
	updatedAt     time.Time
	result        obj       // CallToolResult (completed, or failed with isError in legacy)
	rpcErr        *rpcError // failed with a protocol error
	inputs        map[string]*pendingInput
	inputOrder    []string
	inputSeq      int
	history       []Status
	changed       chan struct{} // closed and replaced on every change
	cancelWork    context.CancelFunc
}

func (t *task) expired(now time.Time) bool {
	return t.ttl > 0 && !now.Before(t.createdAt.Add(t.ttl))
}

// unanswered returns the keys still waiting for an answer, in order.
func (t *task) unanswered() []string {
	var keys []string
	for _, k := range t.inputOrder {
		if p := t.inputs[k]; p != nil && !p.answered {
			keys = append(keys, k)
		}
	}
	return keys
}

// taskStore holds all tasks.
type taskStore struct {
	r     *Receiver
	mu    sync.Mutex
	tasks map[string]*task
	order []string // creation order, for tasks/list
	seq   uint64
}

func newTaskStore(r *Receiver) *taskStore {
	return &taskStore{r: r, tasks: map[string]*task{}}
}

// errTooMany is returned when a tenant has too many non-terminal tasks.
var errTooMany = errf(CodeInternalError, "Too many concurrent tasks for this requestor")

// create registers a new working task. It is visible to tasks/get on return.
func (s *taskStore) create(id Identity, e era, tool string, sessionID string, ttl time.Duration, cancel context.CancelFunc) (*task, *rpcError) {
	now := s.r.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if max := s.r.cfg.MaxConcurrentTasks; max > 0 {
		n := 0
		for _, t := range s.tasks {
			if t.tenant == id.Tenant && !t.status.Terminal() && !t.expired(now) {
				n++
			}
		}
		if n >= max {
			e := *errTooMany
			e.Message = fmt.Sprintf("Too many concurrent tasks for this requestor (limit %d)", max)
			return nil, &e
		}
	}
	t := &task{
		id: newID("task_"), tenant: id.Tenant, actor: id.Actor, era: e, tool: tool,
		sessionID: sessionID, createdAt: now, updatedAt: now, ttl: ttl,
		poll: s.r.cfg.DefaultPollInterval, status: StatusWorking, statusMessage: "Working",
		inputs: map[string]*pendingInput{}, history: []Status{StatusWorking},
		changed: make(chan struct{}), cancelWork: cancel,
	}
	s.seq++
	t.seq = s.seq
	s.tasks[t.id] = t
	s.order = append(s.order, t.id)
	s.r.stats.add(func(c *Counters) { c.TasksCreated++ })
	return t, nil
}

// lookup finds a live task of the tenant created in era e; unknown, expired,
// foreign and other-era tasks are all reported as not found. A task answers
// only in the era that created it: its wire shape and outcome semantics
// (an isError result is legacy "failed" but extension "completed") belong to
// that era, and the extension reference says not to rely on an id across eras.
func (s *taskStore) lookup(id Identity, e era, taskID string) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookupLocked(id, e, taskID)
}

func (s *taskStore) lookupLocked(id Identity, e era, taskID string) *task {
	t := s.tasks[taskID]
	if t == nil || t.tenant != id.Tenant || t.era != e || t.expired(s.r.cfg.Now()) {
		return nil
	}
	return t
}

// transitionLocked moves t to status `to` if the state machine allows it. It
// records and counts a refused transition and reports false.
func (s *taskStore) transitionLocked(t *task, to Status, msg string) bool {
	if !ValidTransition(t.status, to) {
		if !t.status.Terminal() {
			s.r.stats.add(func(c *Counters) { c.InvalidTransitions++ })
			s.r.log.Error("refused invalid task transition", "task", t.id, "from", t.status, "to", to)
		}
		return false
	}
	t.status = to
	t.statusMessage = msg
	t.updatedAt = s.r.cfg.Now()
	t.history = append(t.history, to)
	s.notifyLocked(t)
	s.r.log.Info("task status", "task", t.id, "tenant", t.tenant, "actor", t.actor, "tool", t.tool, "status", to)
	return true
}

// notifyLocked wakes waiters and queues status notifications.
// wake runs the task's waiters again (their onChange) without a change to report: a stream
// that held its questions closed.
func (s *taskStore) wake(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(t.changed)
	t.changed = make(chan struct{})
}

func (s *taskStore) notifyLocked(t *task) {
	close(t.changed)
	t.changed = make(chan struct{})
	s.r.notes.push(s.snapshotLocked(t))
}

// finish ends a task with a result or a protocol error. Legacy tasks end
// failed on an isError result; extension tasks end completed.
func (s *taskStore) finish(t *task, result obj, rerr *rpcError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.status.Terminal() {
		return
	}
	// The outcome is in place before the transition, which publishes the
	// snapshot: a notifications/tasks for the terminal status carries it.
	prevResult, prevErr := t.result, t.rpcErr
	var ok bool
	switch {
	case rerr != nil:
		t.rpcErr = rerr
		ok = s.transitionLocked(t, StatusFailed, rerr.Message)
	case result != nil && result["isError"] == true && t.era == eraLegacy:
		t.result = result
		ok = s.transitionLocked(t, StatusFailed, "Tool reported an error")
	default:
		msg := "Completed"
		if result != nil && result["isError"] == true {
			msg = "Completed with a tool error"
		}
		t.result = result
		ok = s.transitionLocked(t, StatusCompleted, msg)
	}
	if !ok {
		t.result, t.rpcErr = prevResult, prevErr
	}
}

// cancel sets the task cancelled (before the caller responds) and stops its
// work. It reports the task's status before the call.
func (s *taskStore) cancel(t *task, msg string) Status {
	s.mu.Lock()
	prev := t.status
	ok := s.transitionLocked(t, StatusCancelled, msg)
	cancel := t.cancelWork
	s.mu.Unlock()
	if ok && cancel != nil {
		cancel()
	}
	return prev
}

// awaitInput parks the task in input_required with the given requests and
// waits until every one is answered (the task is then working again) or ctx
// ends. Keys are minted unique for the task's lifetime.
func (s *taskStore) awaitInput(ctx context.Context, t *task, reqs []inputRequest, msg string) (map[string]json.RawMessage, error) {
	s.mu.Lock()
	if t.status.Terminal() {
		s.mu.Unlock()
		return nil, context.Canceled
	}
	keys := make(map[string]string, len(reqs)) // minted → base
	for _, r := range reqs {
		t.inputSeq++
		k := fmt.Sprintf("%s_%d", r.Key, t.inputSeq)
		keys[k] = r.Key
		r.Key = k
		t.inputs[k] = &pendingInput{req: r}
		t.inputOrder = append(t.inputOrder, k)
	}
	s.transitionLocked(t, StatusInputRequired, msg)
	for {
		done := true
		for k := range keys {
			if !t.inputs[k].answered {
				done = false
			}
		}
		if done {
			out := make(map[string]json.RawMessage, len(keys))
			for k, base := range keys {
				out[base] = t.inputs[k].answer
				delete(t.inputs, k)
			}
			t.inputOrder = t.unanswered()
			if t.status == StatusInputRequired && len(t.inputOrder) == 0 {
				s.transitionLocked(t, StatusWorking, "Working")
			}
			s.mu.Unlock()
			return out, nil
		}
		ch := t.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		if t.status.Terminal() {
			s.mu.Unlock()
			return nil, context.Canceled
		}
	}
}

// answer records answers by key. Unknown and already-answered keys are
// ignored. When the last pending key is answered the task returns to working
// before answer returns, so the next snapshot never shows input_required with
// nothing to answer. It reports how many keys it accepted.
func (s *taskStore) answer(t *task, answers map[string]json.RawMessage) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.status != StatusInputRequired {
		return 0
	}
	n := 0
	for k, v := range answers {
		p := t.inputs[k]
		if p == nil || p.answered {
			continue
		}
		p.answered, p.answer = true, v
		n++
	}
	if n == 0 {
		return 0
	}
	if len(t.unanswered()) == 0 {
		s.transitionLocked(t, StatusWorking, "Working")
	} else {
		s.notifyLocked(t)
	}
	return n
}

// wait blocks until the task is terminal or ctx ends. onChange runs (without
// the lock) after every change while the task is not terminal.
func (s *taskStore) wait(ctx context.Context, t *task, onChange func()) error {
	for {
		s.mu.Lock()
		term := t.status.Terminal()
		ch := t.changed
		s.mu.Unlock()
		if term {
			return nil
		}
		if onChange != nil {
			onChange()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// taskSnapshot is a consistent copy of a task for encoding.
type taskSnapshot struct {
	ID            string
	Seq           uint64
	Tenant        string
	Era           era
	SessionID     string
	Status        Status
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	TTL           time.Duration
	Poll          time.Duration
	Result        obj
	Err           *rpcError
	Inputs        []inputRequest // unanswered
}

func (s *taskStore) snapshot(t *task) taskSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(t)
}

func (s *taskStore) snapshotLocked(t *task) taskSnapshot {
	snap := taskSnapshot{
		ID: t.id, Seq: t.seq, Tenant: t.tenant, Era: t.era, SessionID: t.sessionID, Status: t.status,
		StatusMessage: t.statusMessage, CreatedAt: t.createdAt, UpdatedAt: t.updatedAt,
		TTL: t.ttl, Poll: t.poll, Result: t.result, Err: t.rpcErr,
	}
	for _, k := range t.unanswered() {
		snap.Inputs = append(snap.Inputs, t.inputs[k].req)
	}
	return snap
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// legacyTask encodes the 2025-11-25 Task object.
func (ts taskSnapshot) legacyTask() obj {
	o := obj{
		"taskId": ts.ID, "status": string(ts.Status), "statusMessage": ts.StatusMessage,
		"createdAt":     ts.CreatedAt.UTC().Format(timeLayout),
		"lastUpdatedAt": ts.UpdatedAt.UTC().Format(timeLayout),
		"pollInterval":  ts.Poll.Milliseconds(),
	}
	if ts.TTL > 0 {
		o["ttl"] = ts.TTL.Milliseconds()
	} else {
		o["ttl"] = nil
	}
	return o
}

// extensionTask encodes the 2026-07-28 flat Task fields.
func (ts taskSnapshot) extensionTask() obj {
	o := obj{
		"taskId": ts.ID, "status": string(ts.Status), "statusMessage": ts.StatusMessage,
		"createdAt":      ts.CreatedAt.UTC().Format(timeLayout),
		"lastUpdatedAt":  ts.UpdatedAt.UTC().Format(timeLayout),
		"pollIntervalMs": ts.Poll.Milliseconds(),
	}
	if ts.TTL > 0 {
		o["ttlMs"] = ts.TTL.Milliseconds()
	} else {
		o["ttlMs"] = nil
	}
	return o
}

// detailedTask encodes a 2026-07-28 DetailedTask (tasks/get, notifications/tasks).
func (ts taskSnapshot) detailedTask() obj {
	o := ts.extensionTask()
	switch ts.Status {
	case StatusInputRequired:
		reqs := obj{}
		for _, in := range ts.Inputs {
			reqs[in.Key] = obj{"method": in.Method, "params": in.Params}
		}
		o["inputRequests"] = reqs
	case StatusCompleted:
		o["result"] = ts.Result
	case StatusFailed:
		if ts.Err != nil {
			o["error"] = ts.Err
		} else {
			o["error"] = errf(CodeInternalError, "Task failed")
		}
	}
	return o
}

// listPage returns up to n of the tenant's live 2025-11-25 tasks (the
// extension has no tasks/list) created after the task of sequence after (0:
// from the first), in creation order, and whether more follow. It starts at
// after's place (creation order is sequence order) and reads no further than
// the page, so a page costs its own size, not the tenant's whole list.
func (s *taskStore) listPage(id Identity, after uint64, n int) ([]taskSnapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.order), func(i int) bool {
		t := s.tasks[s.order[i]]
		return t == nil || t.seq > after
	})
	var out []taskSnapshot
	for ; i < len(s.order); i++ {
		t := s.lookupLocked(id, eraLegacy, s.order[i])
		if t == nil || t.seq <= after {
			continue
		}
		if len(out) == n {
			return out, true
		}
		out = append(out, s.snapshotLocked(t))
	}
	return out, false
}

// purge deletes expired tasks and stops their work.
func (s *taskStore) purge() int {
	now := s.r.cfg.Now()
	s.mu.Lock()
	var cancels []context.CancelFunc
	n := 0
	for id, t := range s.tasks {
		if t.expired(now) {
			delete(s.tasks, id)
			if t.cancelWork != nil {
				cancels = append(cancels, t.cancelWork)
			}
			n++
		}
	}
	if n > 0 {
		order := s.order[:0]
		for _, id := range s.order {
			if _, ok := s.tasks[id]; ok {
				order = append(order, id)
			}
		}
		s.order = order
	}
	s.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	if n > 0 {
		s.r.stats.add(func(c *Counters) { c.TasksPurged += n })
	}
	return n
}

// History returns the statuses a task has passed through, in order, or nil
// when the receiver does not hold it (tests use it to check transitions).
func (r *Receiver) History(taskID string) []Status {
	r.tasks.mu.Lock()
	defer r.tasks.mu.Unlock()
	t := r.tasks.tasks[taskID]
	if t == nil {
		return nil
	}
	return append([]Status(nil), t.history...)
}

// TaskIDs returns the ids of every task the receiver holds, sorted.
func (r *Receiver) TaskIDs() []string {
	r.tasks.mu.Lock()
	defer r.tasks.mu.Unlock()
	ids := make([]string, 0, len(r.tasks.tasks))
	for id := range r.tasks.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
