package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

func TestMain(m *testing.M) { testredis.Main(m) }

// An account's ceiling over its keys, in one script with each key's own
// limit (on the account's hash slot; also on a Redis Cluster): three keys
// of 20/s each under a ceiling of 30 get 30 through together; a request
// the ceiling refuses leaves the key's budget untouched, and one the key
// refuses does not count against the account. Without a ceiling a key
// behaves as with Allow.
func TestKeyAndAccount(t *testing.T) {
	rdb := testredis.Universal(t)
	l := New(rdb, 20)
	ctx := context.Background()
	_ = rdb.Ping(ctx)
	var mu sync.Mutex
	byKey, byAccount, allowed := 0, 0, 0
	perKey := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for _, k := range []string{"k1", "k2", "k3"} {
		for i := 0; i < 15; i++ {
			wg.Add(1)
			go func(k string) {
				defer wg.Done()
				p, err := l.KeyAndAccount(ctx, k, "acct_a", 30)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case p.Key.Allowed:
					allowed++
					perKey[k]++
				case p.ByAccount:
					byAccount++
					if p.Account.Limit != 30 || p.Account.RetryAfter < 1 || p.Key.Remaining != 0 || p.Key.Limit != 20 {
						t.Errorf("account refusal %+v", p)
					}
				default:
					byKey++
				}
			}(k)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if allowed < 30 || allowed > 30+int(elapsed/(33*time.Millisecond))+1 || byKey != 0 || allowed+byAccount != 45 {
		t.Fatalf("in %v: %d allowed, %d refused by the account, %d by a key; want 30 by the ceiling", elapsed, allowed, byAccount, byKey)
	}
	// k1's requests the ceiling refused did not spend its own budget:
	// what is left is 20 less those that passed (and this one).
	p, err := l.KeyAndAccount(ctx, "k1", "acct_a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := 20-perKey["k1"]-1, 20-perKey["k1"]-1+int(time.Since(start)/(50*time.Millisecond))+1; p.Key.Remaining < lo || p.Key.Remaining > hi {
		t.Fatalf("k1: %d of its 15 passed, %d remaining; want %d..%d", perKey["k1"], p.Key.Remaining, lo, hi)
	}
	// Once the account's budget has refilled, one key gets its whole
	// burst of 20 under a ceiling of 30; its 5 refusals by its own limit
	// do not count against the account.
	time.Sleep(1100 * time.Millisecond)
	n := 0
	for i := 0; i < 25; i++ {
		p, err := l.KeyAndAccount(ctx, "k4", "acct_a", 30)
		if err != nil {
			t.Fatal(err)
		}
		if p.Key.Allowed {
			n++
		} else if p.ByAccount {
			t.Fatalf("request %d of one key refused by a ceiling of 30: %+v", i, p)
		}
	}
	if n != 20 {
		t.Fatalf("one key got %d of 25 through, want its burst of 20", n)
	}
	// 10 of the account's 30 are left for another key.
	for i := 0; i < 10; i++ {
		if p, _ := l.KeyAndAccount(ctx, "k5", "acct_a", 30); !p.Key.Allowed {
			t.Fatalf("request %d: %+v", i, p)
		}
	}
	if p, _ := l.KeyAndAccount(ctx, "k5", "acct_a", 30); p.Key.Allowed || !p.ByAccount {
		t.Fatalf("past the ceiling: %+v", p)
	}
	// No ceiling: the key's own limit only, with its figures.
	for i := 0; i < 20; i++ {
		p, err := l.KeyAndAccount(ctx, "solo", "acct_b", 0)
		if err != nil || !p.Key.Allowed || p.Key.Limit != 20 || p.Key.Remaining != 19-i {
			t.Fatalf("request %d: %+v %v", i, p, err)
		}
	}
	if p, _ := l.KeyAndAccount(ctx, "solo", "acct_b", 0); p.Key.Allowed || p.ByAccount || p.Key.RetryAfter != 1 {
		t.Fatalf("21st request: %+v", p)
	}
	// Rates so high that a request's interval is lost in the float (load
	// tests run with --rate-limit 1000000000) allow, as redis_rate did.
	huge := New(rdb, 1_000_000_000)
	for i := 0; i < 3; i++ {
		if p, err := huge.KeyAndAccount(ctx, "fast", "acct_c", 1_000_000_000); err != nil || !p.Key.Allowed {
			t.Fatalf("huge rate: %+v %v", p, err)
		}
	}
}

// A key hammered past its limit: the first refusals say 1 s, and once the
// second's requests reach three times the limit (2/s: 2 allowed + 4
// refused) Retry-After is 5 s; each refusal is counted by the pair script
// itself (one round trip a request), for the key and for the account's
// ceiling alike.
func TestKeyAndAccountHammered(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		keyRate     int
		accountRate int
		byAccount   bool
	}{{"key", 2, 0, false}, {"account", 100, 2, true}} {
		t.Run(c.name, func(t *testing.T) {
			l := New(rdb, c.keyRate)
			// Start at the beginning of a second so the burst stays in one.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
			var got []int
			for i := 0; i < 8; i++ {
				p, err := l.KeyAndAccount(ctx, "k-"+c.name, "acct_"+c.name, c.accountRate)
				if err != nil {
					t.Fatal(err)
				}
				if p.Key.Allowed {
					got = append(got, 0)
					continue
				}
				if p.ByAccount != c.byAccount {
					t.Fatalf("request %d: %+v", i, p)
				}
				got = append(got, p.Key.RetryAfter)
			}
			want := []int{0, 0, 1, 1, 1, 5, 5, 5}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("Retry-After per request %v, want %v", got, want)
				}
			}
		})
	}
}
