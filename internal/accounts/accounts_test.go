package accounts_test

import (
	"context"
	"errors"
	"testing"

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
