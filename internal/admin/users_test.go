package admin_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/dashboard/users"
	"github.com/bulkd/bulkd/internal/testredis"
)

func TestAdminDashboardUsers(t *testing.T) {
	rdb, srv := testredis.Client(t)
	now := time.Now()
	c := &cli{t: t, url: srv.URL, now: now}
	acct := strings.TrimSpace(c.run("account", "create", "--name", "Acme"))
	ctx := context.Background()
	us := users.New(rdb, nil, users.Options{})

	// With a password from stdin: the user id, and the password works.
	var stdout, stderr bytes.Buffer
	err := admin.Main(ctx, []string{"--redis-url", srv.URL, "user", "create", acct, "--email", "Ann@Example.com", "--password-stdin"},
		admin.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("a long enough password\n"), Now: time.Now})
	if err != nil || !strings.HasPrefix(stdout.String(), "usr_") {
		t.Fatalf("user create --password-stdin: %q %v %s", stdout.String(), err, stderr.String())
	}
	if _, err := us.CheckPassword(ctx, "ann@example.com", "a long enough password"); err != nil {
		t.Fatalf("password sign-in: %v", err)
	}
	// user password: the new password works, the old one does not, and
	// the user's sessions end (issue 18 item 5).
	ann, _, _ := us.ByEmail(ctx, "ann@example.com")
	sess, _, err := us.NewSession(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	err = admin.Main(ctx, []string{"--redis-url", srv.URL, "user", "password", "ann@example.com", "--password-stdin"},
		admin.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("another long password\n"), Now: time.Now})
	if err != nil || strings.TrimSpace(stdout.String()) != ann.ID {
		t.Fatalf("user password: %q %v %s", stdout.String(), err, stderr.String())
	}
	if _, err := us.Session(ctx, sess); err == nil {
		t.Fatal("a session outlived user password")
	}
	if _, err := us.CheckPassword(ctx, "ann@example.com", "another long password"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	// The same email again: refused.
	if _, err := c.try("user", "create", acct, "--email", "ann@example.com"); err == nil {
		t.Fatal("a second user with the same email")
	}
	// Without a password: a one-time link, usable once.
	out := strings.TrimSpace(c.run("user", "create", acct, "--email", "bob@example.com", "--base-url", "https://bulkd.example.com/"))
	const prefix = "https://bulkd.example.com/dashboard/login/link?token="
	if !strings.HasPrefix(out, prefix) {
		t.Fatalf("user create printed %q", out)
	}
	tok := strings.TrimPrefix(out, prefix)
	if u, err := us.RedeemLink(ctx, tok); err != nil || u.Email != "bob@example.com" || u.AccountID != acct {
		t.Fatalf("redeem: %+v %v", u, err)
	}
	if _, err := us.RedeemLink(ctx, tok); err == nil {
		t.Fatal("a link worked twice")
	}
	if out := c.run("user", "link", "bob@example.com"); !strings.HasPrefix(out, "/dashboard/login/link?token=") {
		t.Fatalf("user link printed %q", out)
	}
	// Sessions end everywhere.
	u, _, _ := us.ByEmail(ctx, "bob@example.com")
	id, _, err := us.NewSession(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.run("user", "revoke-sessions", "bob@example.com"); got != "1\n" {
		t.Fatalf("revoke-sessions printed %q", got)
	}
	if _, err := us.Session(ctx, id); err == nil {
		t.Fatal("a revoked session still works")
	}
	if got := c.run("user", "list", acct); strings.Count(got, "\n") != 2 || !strings.Contains(got, "ann@example.com owner\n") {
		t.Fatalf("user list printed %q", got)
	}
	// An unknown account.
	if _, err := c.try("user", "create", "acct_nope", "--email", "x@example.com"); err == nil {
		t.Fatal("a user of an unknown account")
	}
}
