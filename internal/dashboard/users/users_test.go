package users_test

import (
	"context"
	"errors"
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
	us := users.New(rdb, clock, users.Options{IdleTTL: time.Hour, AbsoluteTTL: 3 * time.Hour, Attempts: 3, AttemptWindow: time.Minute})

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

	// Attempts: 3 per window per email and per IP.
	for i := 1; i <= 4; i++ {
		ok, wait, err := us.Attempt(ctx, "ann@example.com", "10.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i <= 3) || (!ok && (wait <= 0 || wait > time.Minute)) {
			t.Fatalf("attempt %d: %v %v", i, ok, wait)
		}
	}
	if ok, _, _ := us.Attempt(ctx, "other@example.com", "10.0.0.1"); ok {
		t.Fatal("the IP's limit did not apply to another email")
	}
	if ok, _, _ := us.Attempt(ctx, "ann@example.com", "10.0.0.2"); ok {
		t.Fatal("the email's limit did not apply from another IP")
	}
	_ = us.Succeeded(ctx, "ann@example.com")
	if ok, _, _ := us.Attempt(ctx, "ann@example.com", "10.0.0.3"); !ok {
		t.Fatal("a success did not reset the email's attempts")
	}
}
