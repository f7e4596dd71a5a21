package apiserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/privacy"
)

// TestSuppressedSinglesMatchOpenAPI: the single endpoints' answer for a
// person on the suppression list (docs/privacy.md) is a 200 of the
// documented shape (the contract check of every exchange), status
// suppressed, nothing charged.
func TestSuppressedSinglesMatchOpenAPI(t *testing.T) {
	ctx := context.Background()
	env := bulkdtest.Start(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.PrivacySecret = "contract-test-secret"
		c.RateLimit = 1_000_000
	}))
	acct, payg := env.Account(credits.Whole(10))
	unl := env.Key(acct, accounts.Unlimited)
	if err := env.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Time{}); err != nil {
		t.Fatal(err)
	}
	h, err := privacy.NewHasher("contract-test-secret")
	if err != nil {
		t.Fatal(err)
	}
	if err := privacy.NewSuppressions(env.Redis, h).Add(ctx, family.EmailSubject("gone@erased.example"),
		family.PersonSubject("Gone", "Person", "erased.example")); err != nil {
		t.Fatal(err)
	}
	for _, r := range []bulkdtest.Response{
		env.Get("/v1/verify?email=gone@erased.example", payg),
		env.PostJSON("/v1/email-lookup", payg, map[string]string{"first_name": "Gone", "last_name": "Person", "domain": "erased.example"}),
		env.PostJSON("/v1/unlimited/email-lookup", unl, map[string]string{"first_name": "gone", "last_name": "PERSON", "domain": "erased.example"}),
	} {
		var m map[string]any
		r.Decode(t, &m)
		if r.Status != http.StatusOK || m["status"] != family.OutcomeSuppressed || m["credits_consumed"] != float64(0) {
			t.Fatalf("suppressed single: %d %s", r.Status, r.Body)
		}
	}
	if got := env.Balance(acct); got != credits.Whole(10) {
		t.Fatalf("balance %s after suppressed singles, want 10", got)
	}
}
