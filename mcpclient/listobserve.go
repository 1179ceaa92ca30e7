package mcpclient

import (
	"context"
	"fmt"
)

// ListedPage is one tasks/list page read to observe the tasks it lists.
type ListedPage struct {
	// Snapshots are the listed tasks, each checked against the state machine as a tasks/get
	// answer is (Violation set when its status breaks it); a task whose listed status
	// contradicts a terminal status learned after the request was sent is left out (stale).
	Snapshots []Snapshot
	// NextCursor is the cursor of the next page, "" on the last page.
	NextCursor string
}

// CanList reports whether conn can observe its tasks through tasks/list: a 2025-11-25
// connection whose server declared tasks.list (the extension has no list).
func CanList(conn Conn) bool {
	c, ok := conn.(*legacyConn)
	if !ok {
		return false
	}
	caps := c.info.Capabilities
	return caps.Known && caps.TasksList
}

// ListObserve reads one tasks/list page ("" = the first) on a connection CanList accepts and
// returns its tasks as observations, validated like tasks/get answers on the same connection.
func ListObserve(ctx context.Context, conn Conn, cursor string) (ListedPage, error) {
	c, ok := conn.(*legacyConn)
	if !ok {
		return ListedPage{}, fmt.Errorf("tasks/list: %w", ErrNotSupported)
	}
	sent := c.tracker.sent()
	page, err := c.ListTasks(ctx, cursor)
	if err != nil {
		return ListedPage{}, err
	}
	out := ListedPage{NextCursor: page.NextCursor, Snapshots: make([]Snapshot, 0, len(page.Tasks))}
	for _, t := range page.Tasks {
		v, stale := c.tracker.answer(t.ID, t.Status, sent)
		if stale {
			continue
		}
		out.Snapshots = append(out.Snapshots, Snapshot{Task: t, InputRequests: c.inputs.list(t.ID), Violation: v})
	}
	return out, nil
}

// NotifiesStatus reports whether conn is known to deliver status notifications now: a
// 2025-11-25 connection whose standalone GET stream is open and has carried at least one
// notifications/tasks/status since it opened. Notifications stay hints (they MUST NOT be
// relied on): a watcher may poll such a connection's tasks more slowly, never stop.
func NotifiesStatus(conn Conn) bool {
	c, ok := conn.(*legacyConn)
	return ok && c.getOpen.Load() && c.getNotified.Load()
}
