package web

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/reconcile"
)

// TestPagesSayEnumsAndDurationsInWords loads the console's pages over operations of every route
// and checks their text for a value in code form: a snake_case enum ("job_api", "read_only",
// "sync_timeout") or a Go duration ("5m0s", "300ms"). Identifiers are allowed where they are
// shown as such (in monospace, in a stored JSON toggle, in the window title): tool names, ids,
// codes beside their words.
func TestPagesSayEnumsAndDurationsInWords(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	task := e.start(t, "acme", "refund", "words-1", `{"outcome": "hang"}`)
	failed := e.start(t, "acme", "refund", "words-2", `{"outcome": "tool_error", "text": "declined"}`)
	job := e.start(t, "acme", "payout", "words-3", `{"duration_ms": 10}`)
	sync := e.start(t, "acme", "lookup", "words-4", `{}`)
	handoff := e.start(t, "acme", "kyc", "words-5", `{}`)
	reject := e.start(t, "acme", "closure", "words-6", `{}`)
	item := e.openItem(t, "acme", "words-item", reconcile.ReasonSyncTimeout)
	_, passes := e.b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "the tool error and the job", func() bool {
		return e.b.Detail(t, failed).Envelope != nil && e.b.Detail(t, job).Job.Status == "succeeded"
	})
	withRollout(t, e.testEnv)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO transition_violations (operation_id, task_id, from_state, to_state, source) VALUES ($1, 't', 'completed', 'working', 'poll')`, failed); err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, wf := range e.b.Policy.Workflows {
		tools = append(tools, wf.Tool)
	}
	pages := []string{"/", "/inbox", "/operations", "/reconcile", "/reconcile/" + item, "/servers", "/workflows", "/killswitch",
		"/flags", "/gates", "/audit", "/admin/accounts", "/admin/tokens"}
	for _, id := range []string{task, failed, job, sync, handoff, reject} {
		pages = append(pages, "/operations/"+id)
	}
	hidden := regexp.MustCompile(`(?s)<script.*?</script>|<style.*?</style>|<title>.*?</title>|<details data-testid="audit-json">.*?</details>`)
	monoText := regexp.MustCompile(`(<[^>]*class="[^"]*\bmono\b[^"]*"[^>]*>)[^<]*`)
	tags := regexp.MustCompile(`<[^>]*>`)
	snake := regexp.MustCompile(`\b[a-z]+(?:_[a-z0-9]+)+\b`)
	goDuration := regexp.MustCompile(`\b\d+(?:\.\d+)?(?:h\d+m\d+(?:\.\d+)?s|m\d+(?:\.\d+)?s|ms|µs|ns)\b|\b\d+h\d+m\b`)
	token := regexp.MustCompile(`^tg_[0-9a-f]+$`)
	for _, p := range pages {
		res, body := e.do(t, "admin", "GET", p, nil)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
		text := tags.ReplaceAllString(monoText.ReplaceAllString(hidden.ReplaceAllString(body, " "), "$1"), " ")
		for _, m := range snake.FindAllString(text, -1) {
			if !slices.Contains(tools, m) && !token.MatchString(m) {
				t.Errorf("%s shows %q in code form", p, m)
			}
		}
		for _, m := range goDuration.FindAllString(text, -1) {
			t.Errorf("%s shows the duration %q in code form", p, m)
		}
	}
}
