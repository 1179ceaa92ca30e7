package gates_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// precreate makes n finished tasks of the token's identity, so its tasks/list spans pages.
func precreate(t *testing.T, url, token string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: url, Token: token, Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range n {
		if _, err := conn.CreateTask(ctx, "work_optional", map[string]any{}, mcpclient.TaskOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func legacyReceiver(t *testing.T, tokens map[string]receiver.Identity) (*receiver.Receiver, string) {
	t.Helper()
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasLegacy, DefaultPollInterval: 30 * time.Millisecond, MaxTTL: time.Minute, Tokens: tokens})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); rcv.Close() })
	return rcv, "http://" + ln.Addr().String() + "/mcp"
}

func caseNamed(t *testing.T, run *gates.Run, name string) gates.Case {
	t.Helper()
	for _, c := range run.Cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %s:\n%s", name, summary(run))
	return gates.Case{}
}

// TestListingAcrossIdentitiesIsReadToTheLastPage: with more tasks than a tasks/list page,
// another identity's listing is read page by page and our cursor is replayed by it; a server
// binding tasks and cursors to the identity passes both, one sharing them between the two
// identities fails the hard gate, the task found past the first page.
func TestListingAcrossIdentitiesIsReadToTheLastPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tokens map[string]receiver.Identity
		want   gates.Verdict
	}{
		{"bound to the identity", map[string]receiver.Identity{"tok-acme": {Tenant: "acme"}, "tok-globex": {Tenant: "globex"}}, gates.Pass},
		{"shared between identities", map[string]receiver.Identity{"tok-acme": {Tenant: "acme"}, "tok-globex": {Tenant: "acme"}}, gates.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv, url := legacyReceiver(t, tc.tokens)
			precreate(t, url, "tok-acme", 25)
			precreate(t, url, "tok-globex", 25)
			run := (&gates.Runner{Build: "test", CaseTimeout: 20 * time.Second}).Run(context.Background(), referenceTarget(rcv, url),
				[]gates.Suite{gates.SuiteContract, gates.SuiteSecurity})
			t.Log("\n" + summary(run))
			list, cursor := caseNamed(t, run, "cross-identity-list"), caseNamed(t, run, "cross-identity-list-cursor")
			if list.Verdict != tc.want || cursor.Verdict != tc.want || list.Hard != gates.HardCrossIdentity || cursor.Hard != gates.HardCrossIdentity {
				t.Fatalf("list %s (%s), cursor replay %s (%s), want %s", list.Verdict, list.Reason, cursor.Verdict, cursor.Reason, tc.want)
			}
			if tc.want == gates.Fail && !strings.Contains(list.Reason, "page 2") && !strings.Contains(list.Reason, "page 3") {
				t.Fatalf("the shared task was not found past the first page: %s", list.Reason)
			}
			if tc.want == gates.Pass && !strings.Contains(list.Reason, "of 2 pages") {
				t.Fatalf("the other identity's 25 tasks were not read over two pages: %s", list.Reason)
			}
			if tc.want == gates.Fail && (run.Verdict != gates.Fail || len(run.HardFailures) != 1 || run.HardFailures[0] != gates.HardCrossIdentity) {
				t.Fatalf("run %s hard %v", run.Verdict, run.HardFailures)
			}
		})
	}
}
