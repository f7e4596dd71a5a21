package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/dashboard/users"
	"github.com/bulkd/bulkd/internal/testredis"
)

// TestAdminUserRole: an account's first dashboard user is its owner, the
// next a member; `user role` changes it, and refuses a role that is not
// owner or member.
func TestAdminUserRole(t *testing.T) {
	rdb, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Now()}
	acct := strings.TrimSpace(c.run("account", "create", "--name", "Acme"))
	ctx := context.Background()
	us := users.New(rdb, nil, users.Options{})
	c.run("user", "create", acct, "--email", "first@example.com")
	c.run("user", "create", acct, "--email", "second@example.com")
	role := func(email string) string {
		u, _, err := us.ByEmail(ctx, email)
		if err != nil {
			t.Fatal(err)
		}
		return u.Role
	}
	if role("first@example.com") != users.RoleOwner || role("second@example.com") != users.RoleMember {
		t.Fatalf("roles: first %s, second %s", role("first@example.com"), role("second@example.com"))
	}
	c.run("user", "role", "second@example.com", "owner")
	c.run("user", "role", "first@example.com", "member")
	if role("first@example.com") != users.RoleMember || role("second@example.com") != users.RoleOwner {
		t.Fatalf("after user role: first %s, second %s", role("first@example.com"), role("second@example.com"))
	}
	if _, err := c.try("user", "role", "first@example.com", "admin"); err == nil {
		t.Fatal("role admin accepted")
	}
	// A user made before roles existed (no role field) is an owner.
	u, _, _ := us.ByEmail(ctx, "first@example.com")
	if err := rdb.HDel(ctx, "bulkd:dash:user:{"+u.ID+"}", "role").Err(); err != nil {
		t.Fatal(err)
	}
	if role("first@example.com") != users.RoleOwner {
		t.Fatal("a user without a role field is not an owner")
	}
}
