package browser

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
)

// TestDeleteAndRetentionInABrowser: the account's owner deletes a job from
// its page (a confirmation page first; the page after it says what was
// removed and refunded, and the balance moved by exactly that), the API
// answers 404 for it, and the owner sets the account's retention on the
// settings page. Every page is audited, weighed and photographed.
func TestDeleteAndRetentionInABrowser(t *testing.T) {
	s := start(t)
	acct, email := s.user(10 * credits.Scale)
	key := s.e.Key(acct, accounts.PayAsYouGo)
	s.signIn(email)

	// Two greylisted addresses keep the job running (retries pending).
	r := s.e.PostJSON("/v1/bulk", key, map[string]any{"emails": []string{"alice@grey.test", "bob@grey.test", "alice@ok.test"}})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	s.open(dashboard.Base+"/jobs/"+sub.JobID, "#delete-job-link")
	s.b.ResetWeight()
	s.b.Run("delete", chromedp.Click(chromedp.CSS("#delete-job-link")), chromedp.WaitVisible(chromedp.CSS("#delete-confirm")))
	if id := s.b.Text("#delete-job-id"); id != sub.JobID {
		t.Fatalf("the confirmation names job %q, want %s", id, sub.JobID)
	}
	s.check("20-delete-confirm")
	before := s.e.Balance(acct)
	s.b.ResetWeight()
	s.b.Run("confirm the deletion", chromedp.Click(chromedp.CSS("#delete-confirm")), chromedp.WaitVisible(chromedp.CSS("#deleted-removed")))
	s.check("21-deleted")
	refunded := strings.TrimSuffix(s.b.Text("#deleted-refunded"), " credits")
	want := credits.Amount(s.e.Balance(acct) - before).String()
	if refunded != want {
		t.Errorf("the page says %q refunded; the balance moved by %s", refunded, want)
	}
	if removed := s.b.Text("#deleted-removed"); !strings.Contains(removed, "rows") || !strings.Contains(removed, "idempotency_record") {
		t.Errorf("removed: %q", removed)
	}
	t.Logf("deleted: %s refunded, %s unprocessed", refunded, s.b.Text("#deleted-unprocessed"))
	// The greylisted addresses kept the job running: something was refunded.
	if refunded == "0" {
		t.Errorf("a running job deleted with nothing refunded")
	}
	if r := s.e.Get("/v1/bulk/"+sub.JobID, key); r.Status != http.StatusNotFound {
		t.Fatalf("the API after the deletion: %d %s", r.Status, r.Body)
	}
	rec, err := s.e.Parts.Engine.Billing.Reconcile(context.Background(), acct)
	if err != nil || rec.Err() != nil {
		t.Fatalf("ledger and balance: %v %v", err, rec.Err())
	}

	// Retention: the owner's form.
	s.open(dashboard.Base+"/", "#credit-balance")
	s.b.ResetWeight()
	s.b.Run("settings", chromedp.Click(chromedp.CSS(`[data-testid="nav-settings"]`)), chromedp.WaitVisible(chromedp.CSS("#retention-form")))
	s.check("22-settings")
	s.b.ResetWeight()
	s.b.Run("keep jobs 7 days", chromedp.SetValue(chromedp.CSS("#retention-days"), "7"), chromedp.Click(chromedp.CSS("#retention-save")),
		chromedp.WaitVisible(chromedp.CSS("#notice")))
	if got := s.b.Text("#retention-effective"); got != "7 days" {
		t.Errorf("after saving 7: %q", got)
	}
	s.check("23-settings-saved")
	a, err := s.e.Parts.API.Accounts.Account(context.Background(), acct)
	if err != nil || a.RetentionDays != 7 {
		t.Fatalf("account retention %v %v, want 7", a, err)
	}
	// The browser refuses a value over the deployment's maximum before
	// anything is sent.
	s.b.Run("try 31 days", chromedp.SetValue(chromedp.CSS("#retention-days"), "31"), chromedp.Click(chromedp.CSS("#retention-save")),
		chromedp.Sleep(300*time.Millisecond))
	if a, _ := s.e.Parts.API.Accounts.Account(context.Background(), acct); a.RetentionDays != 7 {
		t.Fatalf("31 days was saved as %s", strconv.Itoa(a.RetentionDays))
	}
}
