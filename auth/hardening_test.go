package auth_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgtest"
)

// peakHeap samples the heap until stop is closed and returns the largest HeapAlloc seen.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// Sixty sign-ins at once with the production hash cost, for a real and an unknown account: the
// bound on concurrent hashes keeps the heap near two hashes' memory, where unbounded they would
// take sixty times 19 MiB.
func TestConcurrentSignInsKeepTheHeapBounded(t *testing.T) {
	pool := pgtest.New(t)
	ctx := context.Background()
	s := auth.NewStore(pool, auth.Options{Hash: auth.DefaultHashParams, MaxHashes: 2, HashWait: time.Minute})
	if _, _, err := s.CreateAccount(ctx, audit.Actor{Name: "t", Kind: audit.KindCLI}, auth.AllTenants,
		auth.NewAccount{Email: "ann@test", Role: auth.RoleViewer, Scope: auth.AllTenants}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop := make(chan struct{})
	peak := peakHeap(stop)
	var wg sync.WaitGroup
	var failed, other atomic.Int32
	start := make(chan struct{})
	for i := range 60 {
		wg.Go(func() {
			<-start
			email := "ann@test"
			if i%2 == 1 {
				email = "nobody@test"
			}
			// Each attempt from its own address, so throttling does not cut the work short.
			_, err := s.SignIn(ctx, email, "wrong password", "198.51.100."+string(rune('0'+i%10))+string(rune('0'+i/10)), "")
			if errors.Is(err, auth.ErrSignInFailed) {
				failed.Add(1)
			} else {
				other.Add(1)
				t.Errorf("sign-in %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	grown := int64(<-peak) - int64(base.HeapAlloc)
	const bound = 160 << 20
	t.Logf("60 parallel sign-ins: heap grew by at most %d MiB (bound %d MiB); %d failed as wrong", grown>>20, bound>>20, failed.Load())
	if grown > bound {
		t.Errorf("heap grew by %d MiB during 60 parallel sign-ins, want under %d MiB", grown>>20, bound>>20)
	}
	if failed.Load() != 60 {
		t.Errorf("%d of 60 sign-ins failed as wrong passwords", failed.Load())
	}
}

// A sign-in that cannot get a hash slot in time is refused as busy, not queued without end.
func TestSignInQueueTimesOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	s := auth.NewStore(pool, auth.Options{Hash: auth.DefaultHashParams, MaxHashes: 1, HashWait: time.Millisecond})
	var wg sync.WaitGroup
	var busy atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			_, err := s.SignIn(context.Background(), "nobody@test", "x", "203.0.113."+string(rune('1'+i)), "")
			if errors.Is(err, auth.ErrBusy) {
				busy.Add(1)
			} else if !errors.Is(err, auth.ErrSignInFailed) {
				t.Errorf("sign-in: %v", err)
			}
		})
	}
	wg.Wait()
	if busy.Load() == 0 {
		t.Error("eight sign-ins at once with one hash slot and a 1 ms queue: none was refused as busy")
	}
}

func TestDelayGrows(t *testing.T) {
	t.Parallel()
	s := time.Second
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{0, 0}, {2, 0}, {3, 2 * s}, {4, 4 * s}, {5, 8 * s}, {20, time.Minute}} {
		if got := auth.Delay(c.failures, 3, 2*s, time.Minute); got != c.want {
			t.Errorf("Delay(%d) = %s, want %s", c.failures, got, c.want)
		}
	}
}

// An attacker's failures make the attacker wait, not the owner: the owner signs in from another
// address with the right password at once, and learns of the failures; the audit log records
// the throttling once.
func TestAttackerCannotLockOutOwner(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := auth.NewStore(pool, auth.Options{Hash: auth.TestHashParams, Now: func() time.Time { return now }})
	by := audit.Actor{Name: "t", Kind: audit.KindCLI}
	a, pw, err := s.CreateAccount(ctx, by, auth.AllTenants, auth.NewAccount{Email: "admin@test", Role: auth.RoleAdmin, Scope: auth.AllTenants})
	if err != nil {
		t.Fatal(err)
	}
	const attacker, owner = "192.0.2.66", "198.51.100.7"
	var throttled *auth.ThrottledError
	for failures, i := 0, 0; failures < 10; i++ {
		_, err := s.SignIn(ctx, "admin@test", "guess", attacker, "")
		switch {
		case errors.Is(err, auth.ErrSignInFailed):
			failures++
		case errors.As(err, &throttled):
			// The delay passes; the next guess is taken and doubles it.
			now = now.Add(throttled.RetryAfter)
		default:
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if throttled == nil {
		t.Fatal("ten wrong guesses from one address were never delayed")
	}
	if _, err := s.SignIn(ctx, "admin@test", "guess", attacker, ""); !errors.Is(err, auth.ErrThrottled) {
		t.Errorf("the attacker's address right after its failures: %v, want ErrThrottled", err)
	}
	sess, err := s.SignIn(ctx, "admin@test", pw, owner, "")
	if err != nil {
		t.Fatalf("the owner from another address is locked out: %v", err)
	}
	if sess.Account.ID != a.ID || sess.FailedSignIns.Count != 10 || sess.FailedSignIns.From != attacker {
		t.Errorf("the owner is told of %+v", sess.FailedSignIns)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'auth.signin_throttled' AND target = $1`, a.Target()).Scan(&n); err != nil || n != 1 {
		t.Errorf("throttling audit rows: %d %v", n, err)
	}
	// The count is reset: the next sign-in reports nothing.
	if sess, err := s.SignIn(ctx, "admin@test", pw, owner, ""); err != nil || sess.FailedSignIns.Count != 0 {
		t.Errorf("second sign-in: %+v %v", sess.FailedSignIns, err)
	}
}

// A printed password opens a session that must change it; the change ends the account's other
// sessions; the demo's accounts are exempt.
func TestPrintedPasswordMustBeChanged(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := auth.NewStore(pool, auth.Options{Hash: auth.TestHashParams})
	by := audit.Actor{Name: "t", Kind: audit.KindCLI}
	a, pw, err := s.CreateAccount(ctx, by, auth.AllTenants, auth.NewAccount{Email: "bo@test", Role: auth.RoleViewer, Scope: auth.AllTenants})
	if err != nil || !a.MustChangePassword {
		t.Fatalf("new account: must change %v, %v", a.MustChangePassword, err)
	}
	other, err := s.CreateSession(ctx, a.ID, "auth.signin", "")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.SignIn(ctx, "bo@test", pw, "192.0.2.1", "")
	if err != nil || !sess.PasswordChangeRequired {
		t.Fatalf("sign-in with the printed password: change required %v, %v", sess.PasswordChangeRequired, err)
	}
	if got, err := s.Session(ctx, sess.Token); err != nil || !got.PasswordChangeRequired {
		t.Errorf("session read back: change required %v, %v", got.PasswordChangeRequired, err)
	}
	if err := s.ChangePassword(ctx, sess.Token, "not it", "a long new password", ""); !errors.Is(err, auth.ErrWrongPassword) {
		t.Errorf("wrong current password: %v", err)
	}
	if err := s.ChangePassword(ctx, sess.Token, pw, "short", ""); !errors.Is(err, auth.ErrInvalid) {
		t.Errorf("short password: %v", err)
	}
	if err := s.ChangePassword(ctx, sess.Token, pw, pw, ""); !errors.Is(err, auth.ErrInvalid) {
		t.Errorf("unchanged password: %v", err)
	}
	if err := s.ChangePassword(ctx, sess.Token, pw, "a long new password", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Session(ctx, sess.Token); err != nil || got.PasswordChangeRequired || got.Account.MustChangePassword {
		t.Errorf("after the change: %+v, %v", got, err)
	}
	if _, err := s.Session(ctx, other.Token); !errors.Is(err, auth.ErrNoSession) {
		t.Errorf("the account's other session survived the change: %v", err)
	}
	if _, err := s.SignIn(ctx, "bo@test", pw, "192.0.2.1", ""); !errors.Is(err, auth.ErrSignInFailed) {
		t.Errorf("old password: %v", err)
	}
	if got, err := s.SignIn(ctx, "bo@test", "a long new password", "192.0.2.1", ""); err != nil || got.PasswordChangeRequired {
		t.Errorf("new password: change required %v, %v", got.PasswordChangeRequired, err)
	}
	// A reset prints a password again, which must be changed again.
	if a, _, err := s.ResetPassword(ctx, by, auth.AllTenants, a.ID); err != nil || !a.MustChangePassword {
		t.Errorf("reset: must change %v, %v", a.MustChangePassword, err)
	}
	d, dpw, err := s.EnsureAccount(ctx, by, auth.NewAccount{Email: "viewer@demo", Role: auth.RoleViewer, Scope: auth.AllTenants})
	if err != nil || d.MustChangePassword {
		t.Fatalf("demo account: must change %v, %v", d.MustChangePassword, err)
	}
	if got, err := s.SignIn(ctx, "viewer@demo", dpw, "192.0.2.1", ""); err != nil || got.PasswordChangeRequired {
		t.Errorf("demo sign-in: change required %v, %v", got.PasswordChangeRequired, err)
	}
}
