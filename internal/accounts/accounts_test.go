package accounts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

func TestMain(m *testing.M) { testredis.Main(m) }

// Keys authenticate, with their account, first from Redis and then from the
// remembered owner; revocation and any wrong value fail at once. The key's
// record and its account sit in different hash slots, so this also runs
// against a Redis Cluster (BULKD_TEST_REDIS=cluster): before the fix the
// auth script read the account's hash without declaring it (a CROSSSLOT
// error on a cluster), and account and key creation were cross-slot MULTIs.
func TestAuthenticate(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	a, err := st.CreateAccount(ctx, "acme", credits.Whole(7))
	if err != nil {
		t.Fatal(err)
	}
	key, k, err := st.CreateKey(ctx, a.ID, accounts.Unlimited)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := st.ListAccounts(ctx); err != nil || len(ids) != 1 || ids[0] != a.ID {
		t.Fatalf("accounts %v %v", ids, err)
	}
	for i := 0; i < 2; i++ { // first sight, then remembered
		p, err := st.Authenticate(ctx, key)
		if err != nil {
			t.Fatalf("authenticate #%d: %v", i, err)
		}
		if p.Key.ID != k.ID || p.Key.Type != accounts.Unlimited || p.Account.ID != a.ID || p.Account.Name != "acme" ||
			p.Account.Balance != credits.Whole(7) {
			t.Fatalf("principal #%d: %+v", i, p)
		}
	}
	// The account is read fresh each time, not remembered.
	if err := rdb.HSet(ctx, accounts.AccountKey(a.ID), "balance", int64(credits.Whole(3))).Err(); err != nil {
		t.Fatal(err)
	}
	if p, err := st.Authenticate(ctx, key); err != nil || p.Account.Balance != credits.Whole(3) {
		t.Fatalf("balance after change: %+v %v", p, err)
	}
	wrong := key[:len(key)-1] + "x"
	if key[len(key)-1] == 'x' {
		wrong = key[:len(key)-1] + "y"
	}
	for _, bad := range []string{wrong, "bkd_AAAAAAAAAAAA_" + key[17:], "nope"} {
		if _, err := st.Authenticate(ctx, bad); !errors.Is(err, accounts.ErrInvalidKey) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if keys, err := st.Keys(ctx, a.ID); err != nil || len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("keys %+v %v", keys, err)
	}
	if err := st.RevokeKey(ctx, k.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Authenticate(ctx, key); !errors.Is(err, accounts.ErrInvalidKey) {
		t.Fatalf("revoked key: %v", err)
	}
}

// A key's last use is written when it first authenticates and then at most
// once a minute per process, not on every request (the API's hot path).
func TestLastUsedAtMostOnceAMinute(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 9, 12, 0, 30, 0, time.UTC)
	st := accounts.NewStore(rdb, func() time.Time { return now })
	a, err := st.CreateAccount(ctx, "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	key, k, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		t.Helper()
		ks, err := st.Keys(ctx, a.ID)
		if err != nil || len(ks) != 1 || ks[0].ID != k.ID {
			t.Fatalf("keys %+v %v", ks, err)
		}
		return ks[0].LastUsedAt
	}
	if lu := lastUsed(); !lu.IsZero() {
		t.Fatalf("last used %v before any use", lu)
	}
	auth := func() {
		t.Helper()
		if _, err := st.Authenticate(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	auth()
	first := now
	if lu := lastUsed(); !lu.Equal(first) {
		t.Fatalf("last used %v, want %v", lu, first)
	}
	// Within the minute: no write, however many requests.
	for i := 0; i < 5; i++ {
		now = now.Add(10 * time.Second)
		auth()
	}
	if lu := lastUsed(); !lu.Equal(first) {
		t.Fatalf("last used rewritten within the minute: %v", lu)
	}
	// A minute after the last write: written again.
	now = first.Add(time.Minute)
	auth()
	if lu := lastUsed(); !lu.Equal(now) {
		t.Fatalf("last used %v a minute later, want %v", lu, now)
	}
	// A failed authentication marks nothing.
	now = now.Add(2 * time.Minute)
	if _, err := st.Authenticate(ctx, key[:len(key)-1]+"!"); !errors.Is(err, accounts.ErrInvalidKey) {
		t.Fatalf("wrong value: %v", err)
	}
	if lu := lastUsed(); !lu.Equal(first.Add(time.Minute)) {
		t.Fatalf("a failed authentication wrote last used: %v", lu)
	}
}
