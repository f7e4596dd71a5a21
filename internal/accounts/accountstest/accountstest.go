// Package accountstest makes the accounts tests of other packages need:
// an account with a balance and a key, authenticated as a request would be.
package accountstest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// PayAsYouGo creates an account called name with balance credits and a
// pay-as-you-go key, and returns the key's principal. now is the store's
// clock (nil: time.Now).
func PayAsYouGo(t testing.TB, rdb redis.UniversalClient, now func() time.Time, name string, balance credits.Amount) *accounts.Principal {
	t.Helper()
	ctx := context.Background()
	as := accounts.NewStore(rdb, now)
	a, err := as.CreateAccount(ctx, name, balance)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := as.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}
	p, err := as.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
