package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/taskgate/taskgate/operations"
)

// serverHoursReader reads what each server's tasks did per hour (operations.Service does).
type serverHoursReader interface {
	ServerHours(ctx context.Context, scope operations.Scope, window time.Duration) ([]operations.ServerHour, error)
}

// minChartHours is the narrowest window a chart shrinks to when the data is recent.
const minChartHours = 6

// ServerChart is one server's small charts per hour: the poll load (status reads made in the
// hour, the failed ones marked), and the mean time to terminal and the errors of the tasks that
// ended in the hour.
type ServerChart struct {
	Server string
	Hours  []operations.ServerHour
	// Max of each series, for the bar heights.
	MaxPolls  int64
	MaxErrors int
	MaxMean   time.Duration
	// Totals over the window.
	Ended, Errors     int
	Polls, PollErrors int64
}

// serverCharts builds a chart per policy server over the overview's window, shrunk to the hours
// since the first with data (never fewer than minChartHours). nil when the console cannot read
// them.
func (s *Server) serverCharts(r *http.Request, servers []string) []ServerChart {
	rd, ok := s.deps.Operations.(serverHoursReader)
	if !ok || rd == nil || len(servers) == 0 {
		return nil
	}
	p := principal(r)
	got, err := rd.ServerHours(r.Context(), operations.Scope{All: p.Scope.All, Tenants: p.Scope.Tenants}, overviewWindow)
	if err != nil {
		s.deps.Logger.ErrorContext(r.Context(), "server hours", "err", err)
		return nil
	}
	now := s.deps.Now().UTC().Truncate(time.Hour)
	hours := int(overviewWindow / time.Hour)
	first := hours - minChartHours
	for _, h := range got {
		if i := hours - 1 - int(now.Sub(h.Start.UTC())/time.Hour); i >= 0 && i < first {
			first = i
		}
	}
	first = max(first, 0)
	out := make([]ServerChart, 0, len(servers))
	for _, name := range servers {
		c := ServerChart{Server: name}
		byStart := map[time.Time]operations.ServerHour{}
		for _, h := range got {
			if h.Server == name {
				byStart[h.Start.UTC()] = h
			}
		}
		for i := first; i < hours; i++ {
			start := now.Add(-time.Duration(hours-1-i) * time.Hour)
			h, ok := byStart[start]
			if !ok {
				h = operations.ServerHour{Server: name, Start: start}
			}
			c.Hours = append(c.Hours, h)
			c.MaxPolls, c.MaxErrors, c.MaxMean = max(c.MaxPolls, h.Polls), max(c.MaxErrors, h.Errors), max(c.MaxMean, h.MeanToTerminal)
			c.Ended, c.Errors = c.Ended+h.Ended, c.Errors+h.Errors
			c.Polls, c.PollErrors = c.Polls+h.Polls, c.PollErrors+h.PollErrors
		}
		out = append(out, c)
	}
	return out
}

// Small chart geometry (SVG user units): one row of bars per series.
const sparkW, sparkH = 240, 36

func (c ServerChart) barX(i int) string {
	slot := float64(sparkW) / float64(max(1, len(c.Hours)))
	return fmt.Sprintf("%.1f", float64(i)*slot+slot*0.1)
}

func (c ServerChart) barW() string {
	return fmt.Sprintf("%.1f", float64(sparkW)/float64(max(1, len(c.Hours)))*0.8)
}

// bar is the y and height of a bar of value v in a series whose largest value is top.
func bar(v, top float64) (string, string) {
	if top <= 0 || v <= 0 {
		return fmt.Sprintf("%d", sparkH), "0"
	}
	h := v / top * float64(sparkH-2)
	return fmt.Sprintf("%.1f", float64(sparkH)-h), fmt.Sprintf("%.1f", h)
}

func (c ServerChart) pollY(h operations.ServerHour) string {
	y, _ := bar(float64(h.Polls), float64(c.MaxPolls))
	return y
}
func (c ServerChart) pollH(h operations.ServerHour) string {
	_, v := bar(float64(h.Polls), float64(c.MaxPolls))
	return v
}

// pollErrY and pollErrH are the failed reads' part of an hour's poll-load bar, at its foot.
func (c ServerChart) pollErrY(h operations.ServerHour) string {
	y, _ := bar(float64(h.PollErrors), float64(c.MaxPolls))
	return y
}
func (c ServerChart) pollErrH(h operations.ServerHour) string {
	_, v := bar(float64(h.PollErrors), float64(c.MaxPolls))
	return v
}
func (c ServerChart) meanY(h operations.ServerHour) string {
	y, _ := bar(float64(h.MeanToTerminal), float64(c.MaxMean))
	return y
}
func (c ServerChart) meanH(h operations.ServerHour) string {
	_, v := bar(float64(h.MeanToTerminal), float64(c.MaxMean))
	return v
}
func (c ServerChart) errY(h operations.ServerHour) string {
	y, _ := bar(float64(h.Errors), float64(c.MaxErrors))
	return y
}
func (c ServerChart) errH(h operations.ServerHour) string {
	_, v := bar(float64(h.Errors), float64(c.MaxErrors))
	return v
}

// meanWords is a mean time to terminal in words ("—" for an hour in which nothing ended).
func meanWords(h operations.ServerHour) string {
	if h.Ended == 0 {
		return "—"
	}
	return humanDur(h.MeanToTerminal.Round(100 * time.Millisecond))
}

// indexOf is the position of hour h in c's hours.
func indexOf(c ServerChart, h operations.ServerHour) int {
	for i, x := range c.Hours {
		if x.Start.Equal(h.Start) {
			return i
		}
	}
	return 0
}
