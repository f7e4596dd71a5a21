package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

// `webhook-secret ACCOUNT` prints the account's signing secret, made on
// first use and the same afterwards; --rotate prints a new one, which is
// what plain calls print from then on. An unknown account is an error.
func TestWebhookSecret(t *testing.T) {
	_, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	acct := strings.TrimSpace(c.run("account", "create", "--name", "Hooks"))
	first := c.run("webhook-secret", acct)
	if !strings.HasPrefix(first, "whsec_") || strings.Count(first, "\n") != 1 || c.run("webhook-secret", acct) != first {
		t.Fatalf("webhook-secret printed %q", first)
	}
	rotated := c.run("webhook-secret", acct, "--rotate")
	if rotated == first || !strings.HasPrefix(rotated, "whsec_") || c.run("webhook-secret", "--rotate", acct) == rotated {
		t.Fatalf("rotation printed %q after %q", rotated, first)
	}
	if _, err := c.try("webhook-secret", "acct_nope"); err == nil {
		t.Fatal("a secret for an unknown account")
	}
	if _, err := c.try("webhook-secret"); err == nil {
		t.Fatal("no account accepted")
	}
}
