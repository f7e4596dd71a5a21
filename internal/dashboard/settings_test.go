package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
)

// TestRetentionSetting: the account's owner sets its retention on the
// settings page (1 to the deployment's maximum, CSRF checked), and goes
// back to the default; a member sees it and cannot change it.
func TestRetentionSetting(t *testing.T) {
	e, d := start(t)
	ctx := context.Background()
	b, acct, _ := signedIn(t, e, d, 0) // the account's first user: its owner
	st, page := b.get(dashboard.Base + "/settings")
	if st != http.StatusOK || !strings.Contains(page, `id="retention-form"`) || !strings.Contains(page, `id="retention-effective">30 days<`) ||
		!strings.Contains(page, `max="30"`) {
		t.Fatalf("settings page: %d\n%s", st, page)
	}
	tok := csrf(t, page)
	for _, bad := range []string{"0", "31", "x", ""} {
		if st, body := b.post(dashboard.Base+"/settings/retention", url.Values{"csrf_token": {tok}, "retention_days": {bad}}); st != http.StatusUnprocessableEntity ||
			!strings.Contains(body, "from 1 to 30") {
			t.Fatalf("retention %q: %d\n%s", bad, st, body)
		}
	}
	if st, _ := b.post(dashboard.Base+"/settings/retention", url.Values{"retention_days": {"7"}}); st != http.StatusForbidden {
		t.Fatalf("without CSRF token: %d", st)
	}
	st, body := b.post(dashboard.Base+"/settings/retention", url.Values{"csrf_token": {tok}, "retention_days": {"7"}})
	if st != http.StatusOK || !strings.Contains(body, `id="retention-effective">7 days<`) || !strings.Contains(body, `id="notice"`) {
		t.Fatalf("set 7 days: %d\n%s", st, body)
	}
	if a, err := d.Accounts.Account(ctx, acct); err != nil || a.RetentionDays != 7 {
		t.Fatalf("account after setting 7 days: %+v %v", a, err)
	}
	// A job made now is kept 7 days (the engine reads the choice).
	if st, body = b.post(dashboard.Base+"/settings/retention", url.Values{"csrf_token": {tok}, "use_default": {"1"}}); st != http.StatusOK ||
		!strings.Contains(body, "this deployment") {
		t.Fatalf("back to the default: %d\n%s", st, body)
	}
	if a, _ := d.Accounts.Account(ctx, acct); a.RetentionDays != 0 {
		t.Fatalf("retention after going back to the default: %d", a.RetentionDays)
	}

	// A member of the same account: read-only, and the POST is refused.
	if _, err := d.Users.Create(ctx, acct, "member-"+acct+"@example.com", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	m := newBrowser(t, e)
	if st, _ := m.signIn("member-"+acct+"@example.com", "correct horse battery"); st != http.StatusOK {
		t.Fatalf("member sign in: %d", st)
	}
	st, page = m.get(dashboard.Base + "/settings")
	if st != http.StatusOK || strings.Contains(page, `id="retention-form"`) || !strings.Contains(page, `id="retention-owner-only"`) {
		t.Fatalf("member's settings page: %d\n%s", st, page)
	}
	if st, _ := m.post(dashboard.Base+"/settings/retention", url.Values{"csrf_token": {csrf(t, page)}, "retention_days": {"3"}}); st != http.StatusForbidden {
		t.Fatalf("a member's retention change: %d", st)
	}
	if a, _ := d.Accounts.Account(ctx, acct); a.RetentionDays != 0 {
		t.Fatalf("a member changed the retention to %d", a.RetentionDays)
	}
	_ = credits.Scale
}

// TestRetentionSettingCappedByDeployment: under a deployment that keeps
// jobs 5 days, 5 is the most an owner may choose.
func TestRetentionSettingCappedByDeployment(t *testing.T) {
	e, d := start(t)
	e.Parts.Engine.Retention = 5 * 24 * time.Hour
	b, _, _ := signedIn(t, e, d, 0)
	_, page := b.get(dashboard.Base + "/settings")
	if !strings.Contains(page, `max="5"`) || !strings.Contains(page, `id="retention-effective">5 days<`) {
		t.Fatalf("settings under a 5-day deployment:\n%s", page)
	}
	if st, _ := b.post(dashboard.Base+"/settings/retention", url.Values{"csrf_token": {csrf(t, page)}, "retention_days": {"6"}}); st != http.StatusUnprocessableEntity {
		t.Fatalf("6 days under a 5-day deployment: %d", st)
	}
}
