package privacy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/privacy"
)

// TestSinglesHonourSuppression: once the marker is on the suppression
// list, GET /v1/verify and POST /v1/email-lookup (metered and unlimited)
// answer status suppressed at once: no credit taken, no lookup counted
// against the monthly cap, no SMTP session opened, nothing naming the
// marker stored or logged. Another address is still verified (and
// charged), and the ledgers match the balances.
func TestSinglesHonourSuppression(t *testing.T) {
	logs := &logBuf{}
	w := world(t)
	env := startIn(t, logs, w)
	ctx := context.Background()
	acct, key := env.Account(credits.Whole(10))
	uacct, _ := env.Account(0)
	if err := env.Parts.API.Accounts.SetPlan(ctx, uacct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ukey := env.Key(uacct, accounts.Unlimited)

	h, err := privacy.NewHasher(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := privacy.NewSuppressions(env.Redis, h).Add(ctx, family.EmailSubject(markerEmail),
		family.PersonSubject(markerFirst, markerLast, markerDomain)); err != nil {
		t.Fatal(err)
	}
	w.ResetStats()
	before := env.Balance(acct)

	verify := func(addr string) (int, map[string]any) {
		r := env.Get("/v1/verify?email="+url.QueryEscape(addr)+"&timeout=10", key)
		var m map[string]any
		_ = json.Unmarshal(r.Body, &m)
		if r.Status != http.StatusOK {
			t.Fatalf("verify: %d %s", r.Status, r.Body)
		}
		return r.Status, m
	}
	// Case and blanks do not matter: the canonical subject is compared.
	for _, addr := range []string{markerEmail, " ZELDA.Quistorpova@PrivTest.example "} {
		_, m := verify(addr)
		if m["status"] != "suppressed" || m["reason"] != "suppressed" || m["email"] != "" || m["credits_consumed"] != float64(0) {
			t.Fatalf("verify of a suppressed address: %v", m)
		}
	}
	person := map[string]string{"first_name": " zelda", "last_name": "QUISTORPOVA", "domain": markerDomain}
	for _, c := range []struct{ path, key string }{{"/v1/email-lookup", key}, {"/v1/unlimited/email-lookup", ukey}} {
		r := env.PostJSON(c.path, c.key, person)
		var m map[string]any
		_ = json.Unmarshal(r.Body, &m)
		if r.Status != http.StatusOK || m["status"] != "suppressed" || m["substatus"] != "suppressed" || m["first_name"] != "" ||
			m["email"] != nil || m["credits_consumed"] != float64(0) {
			t.Fatalf("%s of a suppressed person: %d %s", c.path, r.Status, r.Body)
		}
	}
	if st := w.Stats(); st.Sessions != 0 || st.Rcpts != 0 {
		t.Fatalf("suppressed singles opened %d SMTP sessions (%d RCPTs), want 0", st.Sessions, st.Rcpts)
	}
	if got := env.Balance(acct); got != before {
		t.Fatalf("balance %s after suppressed singles, want %s (nothing charged)", got, before)
	}
	r := env.Get("/v1/unlimited/usage", ukey)
	if !bytes.Contains(r.Body, []byte(`"single_lookups_used":0`)) {
		t.Fatalf("usage after a suppressed unlimited lookup: %s", r.Body)
	}

	// Someone else is still verified, over SMTP, and charged.
	_, m := verify("john.smith@" + markerDomain)
	if m["status"] != "deliverable" || m["credits_consumed"] != 0.2 {
		t.Fatalf("verify of another address: %v", m)
	}
	if st := w.Stats(); st.Sessions == 0 {
		t.Fatalf("the other address opened no SMTP session")
	}
	if got := env.Balance(acct); got != before-credits.Amount(credits.Scale/5) {
		t.Fatalf("balance %s after one verdict, want %s", got, before-credits.Amount(credits.Scale/5))
	}
	// With the list unreadable the answer is a 503, not a check: the
	// suppression list's key holding another type makes SCARD fail.
	if err := env.Redis.Rename(ctx, privacy.SuppressedKey, "suppressed-aside").Err(); err != nil {
		t.Fatal(err)
	}
	if err := env.Redis.Set(ctx, privacy.SuppressedKey, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r := env.Get("/v1/verify?email="+url.QueryEscape(markerEmail), key); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("verify with the list unreadable: %d %s", r.Status, r.Body)
	}
	if err := env.Redis.Rename(ctx, "suppressed-aside", privacy.SuppressedKey).Err(); err != nil {
		t.Fatal(err)
	}
	scan(t, env, logs, "suppressed singles")
	reconcile(t, env, acct, uacct)
}
