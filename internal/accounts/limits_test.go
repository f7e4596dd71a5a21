package accounts_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/testredis"
)

// The key limit: concurrent creations take exactly the free places (one
// script on the account's slot counts the keys not revoked), a revoked key
// gives its place back, the account's override wins over the default, and
// keys revoked before the revoked set existed are found when they would
// refuse a creation. Before the fix an account could make any number of
// keys, each with its own 20 requests/s. Also on a Redis Cluster.
func TestKeyLimit(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	st.Limits = accounts.Limits{Keys: 3}
	a, err := st.CreateAccount(ctx, "keys", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var made []string
	refused := 0
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
			mu.Lock()
			defer mu.Unlock()
			var le *accounts.LimitError
			switch {
			case err == nil:
				made = append(made, v)
			case errors.As(err, &le) && le.Limit == accounts.LimitKeys && le.Max == 3 && le.Used == 3:
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(made) != 3 || refused != 9 {
		t.Fatalf("%d keys made, %d refused; want 3 and 9", len(made), refused)
	}
	keys, _ := st.Keys(ctx, a.ID)
	if len(keys) != 3 {
		t.Fatalf("%d keys listed: the refused ones must leave nothing", len(keys))
	}
	if n := len(testKeys(t, rdb, "bulkd:apikey:*")); n != 3 {
		t.Fatalf("%d key records, want 3", n)
	}
	// A revoked key frees its place.
	if err := st.RevokeKey(ctx, accounts.KeyIDOf(made[0])); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo); err != nil {
		t.Fatalf("after a revocation: %v", err)
	}
	// The account's own limit wins.
	if err := st.SetLimit(ctx, a.ID, accounts.LimitKeys, 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateKey(ctx, a.ID, accounts.Unlimited); err != nil {
		t.Fatalf("under the override: %v", err)
	}
	if _, _, err := st.CreateKey(ctx, a.ID, accounts.Unlimited); err == nil {
		t.Fatal("a fifth key under a limit of 4")
	}
	// A key revoked the old way (its record only, as before the revoked
	// set): the refusal checks the records and finds the place.
	keys, _ = st.Keys(ctx, a.ID)
	var victim string
	for _, k := range keys {
		if !k.Revoked {
			victim = k.ID
			break
		}
	}
	if err := rdb.HSet(ctx, "bulkd:apikey:"+victim, "revoked", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo); err != nil {
		t.Fatalf("after an old-style revocation: %v", err)
	}
	if n, _ := st.ActiveKeys(ctx, a.ID); n != 4 {
		t.Fatalf("%d active keys, want 4", n)
	}
}

// Creating and revoking keys in a loop does not grow Redis: past 50
// revoked keys the oldest revoked records are deleted.
func TestRevokedKeysPruned(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	now := testNow()
	st := accounts.NewStore(rdb, now.Now)
	st.Limits = accounts.Limits{Keys: 2}
	a, err := st.CreateAccount(ctx, "churn", 0)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for i := 0; i < 80; i++ {
		now.Tick()
		_, k, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if i == 0 {
			first = k.ID
		}
		now.Tick()
		if err := st.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
	}
	keys, _ := st.Keys(ctx, a.ID)
	if len(keys) != 51 { // pruned to 50 at the last creation, then one more revoked
		t.Fatalf("%d key records listed, want 51", len(keys))
	}
	if n := len(testKeys(t, rdb, "bulkd:apikey:*")); n != 51 {
		t.Fatalf("%d key records in Redis, want 51", n)
	}
	for _, k := range keys {
		if k.ID == first {
			t.Fatal("the oldest revoked key was kept")
		}
	}
}

// testKeys lists the keys matching pattern on every master (KEYS on a
// cluster client asks one node only).
func testKeys(t *testing.T, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tickClock is a clock that moves a second at each Tick.
type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func testNow() *tickClock { return &tickClock{t: time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)} }

func (c *tickClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *tickClock) Tick()          { c.mu.Lock(); c.t = c.t.Add(time.Second); c.mu.Unlock() }
