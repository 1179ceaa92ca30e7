package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskgate/taskgate/audit"
)

// relTime says how long ago (or how far ahead) t is from now, in the units an operator reads
// at a glance: "just now", "42 s ago", "4 min ago", "3 h ago", "2 d ago", "in 4 min 10 s".
func relTime(t, now time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 2*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d.Seconds()))
	case d < 10*time.Minute:
		s = fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%d d", int(d.Hours()/24))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// absTime is the absolute time shown on hover and in the datetime attribute.
func absTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

type nowKey struct{}

// nowFrom is the clock pages use for relative times: the server's clock (Deps.Now) when the
// request carries it, else time.Now.
func nowFrom(ctx context.Context) time.Time {
	if f, ok := ctx.Value(nowKey{}).(func() time.Time); ok {
		return f()
	}
	return time.Now()
}

func joinComma(s []string) string { return strings.Join(s, ", ") }

// actorDetail says what kind of actor a row's is, with the role it acted in.
func actorDetail(a audit.Row) string {
	switch {
	case a.Role != "":
		return "(" + a.Role + ")"
	case a.ActorKind != "account":
		return "(" + a.ActorKind + ")"
	}
	return ""
}
