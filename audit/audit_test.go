package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var someone = audit.Actor{Name: "ops@test", Kind: audit.KindAccount, Role: "operator", RequestID: "r1"}

func TestAppendOnlyInTheDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := audit.NewStore(pool)
	if err := s.Record(ctx, audit.Entry{Actor: someone, Action: "flag.set", Target: "flag:x", After: map[string]bool{"on": true}}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE audit_log SET actor = 'someone else'`,
		`DELETE FROM audit_log`,
		`TRUNCATE audit_log`,
	} {
		if _, err := pool.Exec(ctx, stmt); err == nil {
			t.Errorf("%s: accepted", stmt)
		}
	}
	p, err := s.List(ctx, audit.Filter{AllTenants: true})
	if err != nil || len(p.Rows) != 1 || p.Rows[0].Actor != "ops@test" {
		t.Fatalf("after refused changes: %+v %v", p.Rows, err)
	}
}

// TestRecordSharesTheChangesTransaction: a change rolled back takes its audit row with it.
func TestRecordSharesTheChangesTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := audit.Record(ctx, tx, audit.Entry{Actor: someone, Action: "flag.set"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	p, _ := audit.NewStore(pool).List(ctx, audit.Filter{AllTenants: true})
	if len(p.Rows) != 0 {
		t.Fatalf("rolled-back change left %d audit rows", len(p.Rows))
	}
	if err := audit.Record(ctx, nil, audit.Entry{Action: "x"}); !errors.Is(err, audit.ErrInvalid) {
		t.Errorf("entry without actor: %v", err)
	}
}

func TestListFiltersScopeAndKeysetPages(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := audit.NewStore(pool)
	for i := range 25 {
		tenant := []string{"acme", "globex", ""}[i%3]
		if err := s.Record(ctx, audit.Entry{Actor: someone, Tenant: tenant, Action: []string{"flag.set", "account.create"}[i%2],
			Target: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Pages of 4 within acme's scope cover every acme row once, newest first.
	var seen []string
	f := audit.Filter{Tenants: []string{"acme"}, Limit: 4}
	for {
		p, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			if r.Tenant != "acme" {
				t.Fatalf("row of %q in acme's scope", r.Tenant)
			}
			seen = append(seen, r.Target)
		}
		if p.Next == "" {
			break
		}
		f.Before = p.Next
	}
	if len(seen) != 9 || seen[0] != "24" || seen[8] != "0" {
		t.Errorf("acme pages: %v", seen)
	}
	p, err := s.List(ctx, audit.Filter{AllTenants: true, Action: "account", Limit: 500})
	if err != nil || len(p.Rows) != 12 {
		t.Errorf("action area filter: %d rows, %v", len(p.Rows), err)
	}
	p, err = s.List(ctx, audit.Filter{AllTenants: true, Tenant: "globex", Action: "flag.set"})
	if err != nil || len(p.Rows) != 4 {
		t.Errorf("tenant + action filter: %d rows, %v", len(p.Rows), err)
	}
	if _, err := s.List(ctx, audit.Filter{AllTenants: true, Before: "x"}); !errors.Is(err, audit.ErrBadCursor) {
		t.Errorf("bad cursor: %v", err)
	}
}

// TestListenHearsCommittedChanges: Record's notification arrives once the change commits.
func TestListenHearsCommittedChanges(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan audit.Change, 1)
	<-audit.Listen(ctx, pool, nil, func(c audit.Change) { got <- c })
	if err := audit.NewStore(pool).Record(ctx, audit.Entry{Actor: someone, Tenant: "acme", Action: "killswitch.engage"}); err != nil {
		t.Fatal(err)
	}
	if c := <-got; c.Area != "killswitch" || c.Tenant != "acme" {
		t.Errorf("change %+v", c)
	}
}
