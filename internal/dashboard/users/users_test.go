package users_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/dashboard/users"
	"github.com/bulkd/bulkd/internal/testredis"
)

func TestMain(m *testing.M) { testredis.Main(m) }

// Runs on a Redis Cluster too (BULKD_TEST_REDIS=cluster): no command
// spans two hash slots.
func TestUsersAndSessions(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	us := users.New(rdb, clock, users.Options{IdleTTL: time.Hour, AbsoluteTTL: 3 * time.Hour})

	u, err := us.Create(ctx, "acct_1", " Ann@Example.COM ", "a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := us.Create(ctx, "acct_2", "ann@example.com", ""); !errors.Is(err, users.ErrEmailTaken) {
		t.Fatalf("same email twice: %v", err)
	}
	if _, err := us.CheckPassword(ctx, "ANN@example.com", "a long enough password"); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"ann@example.com", "wrong password"}, {"nobody@example.com", "a long enough password"}} {
		if _, err := us.CheckPassword(ctx, c[0], c[1]); !errors.Is(err, users.ErrBadCredentials) {
			t.Fatalf("%v: %v", c, err)
		}
	}

	// Sessions: idle expiry is extended by use, the absolute one is not.
	id, _, err := us.NewSession(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	id2, _, _ := us.NewSession(ctx, u)
	if id == id2 || len(id) < 43 {
		t.Fatalf("session ids %q %q", id, id2)
	}
	for i := 0; i < 4; i++ { // 2 h 40 min of use, 40 min apart
		advance(40 * time.Minute)
		if _, err := us.Session(ctx, id); err != nil {
			t.Fatalf("in use after %d steps: %v", i, err)
		}
	}
	advance(40 * time.Minute) // 3 h 20 min after sign-in
	if _, err := us.Session(ctx, id); !errors.Is(err, users.ErrNotFound) {
		t.Fatalf("past the absolute expiry: %v", err)
	}
	ss, err := us.Session(ctx, id2)
	if err == nil {
		t.Fatalf("an idle session outlived its expiry check: %+v", ss)
	}

	// Links: one use each, also when redeemed concurrently.
	tok, err := us.NewLink(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := us.RedeemLink(ctx, tok); err == nil {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("a link signed in %d times", wins.Load())
	}

}

// The sign-in throttle: per (email, client) free attempts, then growing
// delays up to a cap; other clients of the same email are never held
// back; a success resets the pair; each client has a window allowance
// over all emails. Runs on a Redis Cluster too.
func TestAttemptThrottle(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	us := users.New(rdb, clock, users.Options{FreeAttempts: 3, AttemptDelay: time.Second, MaxAttemptDelay: 5 * time.Second,
		ClientAttempts: 25, AttemptWindow: time.Hour})
	attempt := func(email, client string) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := us.Attempt(ctx, email, client)
		if err != nil {
			t.Fatal(err)
		}
		return ok, wait
	}
	// 3 free, then 1 s, 2 s, 4 s, 5 s (the cap), 5 s.
	for i := 1; i <= 3; i++ {
		if ok, _ := attempt("ann@example.com", "10.0.0.1"); !ok {
			t.Fatalf("free attempt %d refused", i)
		}
	}
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		ok, wait := attempt("ANN@example.com", "10.0.0.1")
		if ok || wait != d {
			t.Fatalf("want a wait of %v, got ok=%v wait=%v", d, ok, wait)
		}
		advance(d - time.Millisecond)
		if ok, wait := attempt("ann@example.com", "10.0.0.1"); ok || wait != time.Millisecond {
			t.Fatalf("1 ms early: ok=%v wait=%v", ok, wait)
		}
		advance(time.Millisecond)
		if ok, _ := attempt("ann@example.com", "10.0.0.1"); !ok {
			t.Fatalf("after the wait of %v: refused", d)
		}
	}
	// Another client of the same email, and another email of the same
	// client, are not held back.
	if ok, _ := attempt("ann@example.com", "10.0.0.2"); !ok {
		t.Fatal("another client of the email was refused")
	}
	if ok, _ := attempt("bob@example.com", "10.0.0.1"); !ok {
		t.Fatal("another email of the client was refused")
	}
	// A success forgets the pair.
	if err := us.Succeeded(ctx, "ann@example.com", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if ok, _ := attempt("ann@example.com", "10.0.0.1"); !ok {
			t.Fatalf("after a success, attempt %d refused", i)
		}
	}
	// The client's window: 25 attempts over any emails in any window (a
	// sliding one; refused attempts are not counted: a client knocking
	// at its limit is let in again as its oldest attempts leave the
	// window), a success gives its attempt back.
	for i := 1; i <= 25; i++ {
		if ok, _ := attempt(fmt.Sprintf("u%d@example.com", i), "10.0.0.9"); !ok {
			t.Fatalf("client attempt %d refused", i)
		}
	}
	ok, wait := attempt("new@example.com", "10.0.0.9")
	if ok || wait <= 0 || wait > time.Hour {
		t.Fatalf("26th attempt of the client in its window: ok=%v wait=%v", ok, wait)
	}
	if err := us.Succeeded(ctx, "u1@example.com", "10.0.0.9"); err != nil {
		t.Fatal(err)
	}
	if err := us.Succeeded(ctx, "u2@example.com", "10.0.0.9"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := attempt("new@example.com", "10.0.0.9"); !ok {
		t.Fatal("a refunded attempt was refused")
	}
	if ok, _ := attempt("", "10.0.0.9"); !ok {
		t.Fatal("the second refunded attempt (a link) was refused")
	}
	if ok, _ := attempt("", "10.0.0.9"); ok {
		t.Fatal("a link attempt of a client over its allowance went ahead")
	}
	if ok, _ := attempt("new@example.com", "10.0.0.3"); !ok {
		t.Fatal("another client was refused")
	}
	advance(wait)
	if ok, _ := attempt("new2@example.com", "10.0.0.9"); !ok {
		t.Fatal("the next window still refused")
	}
}

// A password change ends every session of the user, also one being made
// from a password check that came just before it.
func TestSetPasswordEndsSessions(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	us := users.New(rdb, nil, users.Options{})
	u, err := us.Create(ctx, "acct_1", "ann@example.com", "the old password")
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := us.NewSession(ctx, u)
	b, _, _ := us.NewSession(ctx, u)
	checked, err := us.CheckPassword(ctx, "ann@example.com", "the old password")
	if err != nil {
		t.Fatal(err)
	}
	n, err := us.SetPassword(ctx, u.ID, "the new password")
	if err != nil || n != 2 {
		t.Fatalf("SetPassword: %d sessions, %v", n, err)
	}
	late, _, err := us.NewSession(ctx, checked) // signed in with the old password
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a, b, late} {
		if _, err := us.Session(ctx, id); !errors.Is(err, users.ErrNotFound) {
			t.Fatalf("a session from before the change still works: %v", err)
		}
	}
	if _, err := us.CheckPassword(ctx, "ann@example.com", "the old password"); !errors.Is(err, users.ErrBadCredentials) {
		t.Fatalf("old password: %v", err)
	}
	fresh, err := us.CheckPassword(ctx, "ann@example.com", "the new password")
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := us.NewSession(ctx, fresh)
	if _, err := us.Session(ctx, id); err != nil {
		t.Fatalf("a session after the change: %v", err)
	}
}

// Issue 26, item 6 (the hunt): successful sign-ins give their throttle
// attempt back, so whoever has a user's password could make sessions
// without end, 12 h of Redis each. A user has at most MaxSessions: the
// 21st sign-in ends the oldest session, and the list of sessions stays
// bounded whatever the number of sign-ins.
func TestSessionsPerUserBounded(t *testing.T) {
	rdb := testredis.Universal(t)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { now = now.Add(time.Millisecond); return now }
	us := users.New(rdb, clock, users.Options{MaxSessions: 20})
	ctx := context.Background()
	u, err := us.Create(ctx, "acct_s", "s@example.com", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 200 {
		id, _, err := us.NewSession(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	live := 0
	for i, id := range ids {
		_, err := us.Session(ctx, id)
		switch {
		case err == nil:
			live++
			if i < len(ids)-20 {
				t.Errorf("session %d of 200 is still live", i)
			}
		case !errors.Is(err, users.ErrNotFound):
			t.Fatal(err)
		}
	}
	if live != 20 {
		t.Fatalf("%d live sessions after 200 sign-ins, want 20", live)
	}
	if n, _ := rdb.SCard(ctx, "bulkd:dash:user:{"+u.ID+"}:sessions").Result(); n != 20 {
		t.Fatalf("the user's list holds %d sessions; want 20", n)
	}
}
