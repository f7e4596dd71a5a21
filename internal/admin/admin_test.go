package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/testredis"
)

type cli struct {
	t   *testing.T
	url string
	now time.Time
}

// run executes one admin command the way a shell would and returns stdout.
func (c *cli) run(args ...string) string {
	c.t.Helper()
	out, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("bulkd admin %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (c *cli) try(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	err := admin.Main(context.Background(), append([]string{"--redis-url", c.url}, args...),
		admin.Env{Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return c.now }})
	return stdout.String(), err
}

func TestAdminRoundTrip(t *testing.T) {
	_, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}

	acct := strings.TrimSpace(c.run("account", "create", "--name", "Acme Data", "--credits", "100.5"))
	if !strings.HasPrefix(acct, "acct_") || strings.Contains(acct, "\n") {
		t.Fatalf("account create printed %q", acct)
	}
	if got := c.run("credits", "add", acct, "0.2", "--note", "promo"); got != "100.7\n" {
		t.Fatalf("credits add printed %q", got)
	}
	if got := c.run("credits", "remove", acct, "50"); got != "50.7\n" {
		t.Fatalf("credits remove printed %q", got)
	}
	if _, err := c.try("credits", "remove", acct, "51"); err == nil {
		t.Fatal("removing more than the balance succeeded")
	}
	key := strings.TrimSpace(c.run("key", "create", acct))
	ukey := strings.TrimSpace(c.run("key", "create", acct, "--type", "unlimited"))
	if accounts.KeyIDOf(key) == "" || accounts.KeyIDOf(ukey) == "" {
		t.Fatalf("keys %q %q", key, ukey)
	}
	if got := c.run("plan", "set", acct, "--plan", "professional", "--state", "active", "--period-end", "2026-06-01T00:00:00Z"); got != acct+"\n" {
		t.Fatalf("plan set printed %q", got)
	}
	if got := c.run("key", "revoke", "bkd_"+accounts.KeyIDOf(ukey)); got != "bkd_"+accounts.KeyIDOf(ukey)+"\n" {
		t.Fatalf("key revoke printed %q", got)
	}

	var view admin.AccountView
	if err := json.Unmarshal([]byte(c.run("account", "show", acct)), &view); err != nil {
		t.Fatal(err)
	}
	if view.Name != "Acme Data" || view.Credits.String() != "50.7" || view.Plan != "professional" || !view.PlanActive ||
		view.CurrentPeriodEnd == nil || !view.CurrentPeriodEnd.Equal(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)) || len(view.Keys) != 2 {
		t.Fatalf("account show: %+v", view)
	}
	revoked := 0
	for _, k := range view.Keys {
		if strings.Contains(key, k.Prefix) && k.Revoked {
			t.Fatal("wrong key revoked")
		}
		if k.Revoked {
			revoked++
		}
		if strings.Contains(c.run("account", "show", acct), strings.TrimPrefix(key, k.Prefix)) {
			t.Fatal("account show prints a key secret")
		}
	}
	if revoked != 1 {
		t.Fatalf("%d revoked keys", revoked)
	}
	if got := c.run("account", "list"); got != acct+"\n" {
		t.Fatalf("account list %q", got)
	}

	lines := strings.Split(strings.TrimSpace(c.run("ledger", acct)), "\n")
	if len(lines) != 2 {
		t.Fatalf("ledger: %q", lines)
	}
	var e struct{ Kind, Amount, After, Note string }
	_ = json.Unmarshal([]byte(lines[0]), &e)
	if e.Kind != "adjust" || e.Amount != "0.2" || e.After != "100.7" || e.Note != "promo" {
		t.Fatalf("ledger line %s", lines[0])
	}
	if _, err := c.try("account", "show", "acct_nope"); err == nil {
		t.Fatal("unknown account shown")
	}
	if _, err := c.try("frobnicate", "now"); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// `account limits --idempotency-bytes`: the default comes from
// BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES (or the flag) as the servers', an
// override is stored in the account's hash, shown, and dropped by
// "default"; another account keeps the default.
func TestAccountLimitsIdempotencyBytes(t *testing.T) {
	rdb, srv := testredis.Client(t)
	t.Setenv("BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES", "4096")
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	acct := strings.TrimSpace(c.run("account", "create", "--name", "A"))
	other := strings.TrimSpace(c.run("account", "create", "--name", "B"))
	view := func(args ...string) admin.LimitView {
		t.Helper()
		out := c.run(append([]string{"account", "limits"}, args...)...)
		var v admin.LimitsView
		if err := json.Unmarshal([]byte(out), &v); err != nil || !strings.Contains(out, `"idempotency_bytes"`) {
			t.Fatalf("%s: %v", out, err)
		}
		return v.IdempotencyBytes
	}
	if v := view(acct, "--idempotency-bytes", "2MiB"); v.Limit != 2<<20 || v.Default != 4096 || v.Override == nil || *v.Override != 2<<20 ||
		v.Used == nil || *v.Used != 0 {
		t.Fatalf("set: %+v", v)
	}
	if f := rdb.HGet(context.Background(), accounts.AccountKey(acct), accounts.LimitField(accounts.LimitIdempotencyBytes)).Val(); f != "2097152" {
		t.Fatalf("stored override %q", f)
	}
	if v := view(other); v.Limit != 4096 || v.Override != nil {
		t.Fatalf("other account: %+v", v)
	}
	if v := view(acct, "--idempotency-bytes", "0"); v.Limit != 0 || v.Override == nil || *v.Override != 0 {
		t.Fatalf("no limit: %+v", v)
	}
	if v := view(acct, "--idempotency-bytes", "default"); v.Limit != 4096 || v.Override != nil {
		t.Fatalf("default: %+v", v)
	}
	if _, err := c.try("account", "limits", acct, "--idempotency-bytes", "-1"); err == nil {
		t.Fatal("a negative limit was accepted")
	}
	// The flag wins over the variable.
	var v admin.LimitsView
	if err := json.Unmarshal([]byte(c.run("--account-max-idempotency-bytes", "8192", "account", "limits", acct)), &v); err != nil ||
		v.IdempotencyBytes.Default != 8192 || v.IdempotencyBytes.Limit != 8192 {
		t.Fatalf("flag default: %+v %v", v.IdempotencyBytes, err)
	}
}
