package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/privacy"
)

// TestDeleteJob: a job not started yet is deleted from its page through a
// confirmation form (CSRF checked): every credit it took is refunded, the
// page says what was removed and refunded, the job is gone from the API and
// the dashboard, the ledger matches the balance, the audit log names the
// dashboard user, and another account's user can neither see nor delete it.
func TestDeleteJob(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, key := signedIn(t, e, d, 10*credits.Scale)
	before := e.Balance(acct)
	r := e.PostJSON("/v1/bulk", key, map[string]any{"emails": []string{"a@example.com", "b@example.com", "c@example.com"}})
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	if r.Status != http.StatusOK || e.Balance(acct) != before-3*credits.Scale/5 {
		t.Fatalf("submit: %d %s, balance %s", r.Status, r.Body, e.Balance(acct))
	}
	jobPath := dashboard.Base + "/jobs/" + sub.JobID

	st, page := b.get(jobPath)
	if st != http.StatusOK || !strings.Contains(page, `href="`+jobPath+`/delete"`) {
		t.Fatalf("job page has no delete link: %d\n%s", st, page)
	}
	// Another account's user: 404 for the form and the POST.
	other, _, _ := signedIn(t, e, d, 0)
	_, otherPage := other.get(dashboard.Base + "/keys")
	if st, _ := other.get(jobPath + "/delete"); st != http.StatusNotFound {
		t.Fatalf("another account's delete form: %d", st)
	}
	if st, _ := other.post(jobPath+"/delete", url.Values{"csrf_token": {csrf(t, otherPage)}}); st != http.StatusNotFound {
		t.Fatalf("another account's delete: %d", st)
	}
	st, confirm := b.get(jobPath + "/delete")
	if st != http.StatusOK || !strings.Contains(confirm, `id="delete-job"`) || !strings.Contains(confirm, sub.JobID) {
		t.Fatalf("confirmation page: %d\n%s", st, confirm)
	}
	// Without the CSRF token, or from another site: refused, nothing deleted.
	if st, _ := b.post(jobPath+"/delete", url.Values{}); st != http.StatusForbidden {
		t.Fatalf("delete without CSRF token: %d", st)
	}
	b.origin = "https://evil.example"
	if st, _ := b.post(jobPath+"/delete", url.Values{"csrf_token": {csrf(t, confirm)}}); st != http.StatusForbidden {
		t.Fatalf("cross-site delete: %d", st)
	}
	b.origin = e.URL
	if r := e.Get("/v1/bulk/"+sub.JobID, key); r.Status != http.StatusOK {
		t.Fatalf("the job after refused deletions: %d", r.Status)
	}

	st, done := b.post(jobPath+"/delete", url.Values{"csrf_token": {csrf(t, confirm)}})
	if st != http.StatusOK {
		t.Fatalf("delete: %d\n%s", st, done)
	}
	for _, want := range []string{`id="deleted-unprocessed">3<`, `id="deleted-refunded">0.6 credits<`, `data-removed="rows"`,
		`data-removed="idempotency_record"`, `id="notice"`} {
		if !strings.Contains(done, want) {
			t.Errorf("deleted page lacks %s\n%s", want, done)
		}
	}
	if got := e.Balance(acct); got != before {
		t.Fatalf("balance %s after deleting a job not started, want %s", got, before)
	}
	if r := e.Get("/v1/bulk/"+sub.JobID, key); r.Status != http.StatusNotFound {
		t.Fatalf("API after delete: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{jobPath, jobPath + "/delete"} {
		if st, _ := b.get(p); st != http.StatusNotFound {
			t.Fatalf("%s after delete: %d", p, st)
		}
	}
	if st, _ := b.post(jobPath+"/delete", url.Values{"csrf_token": {csrf(t, confirm)}}); st != http.StatusNotFound {
		t.Fatalf("second delete: %d", st)
	}
	rec, err := e.Parts.Engine.Billing.Reconcile(context.Background(), acct)
	if err != nil || rec.Err() != nil {
		t.Fatalf("ledger and balance: %v %v", err, rec.Err())
	}
	es, err := privacy.NewAudit(e.Redis, 0).Entries(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range es {
		if en.Action == "delete_job" && en.Job == sub.JobID {
			found = strings.HasPrefix(en.Actor, "dashboard:user:") && en.Counts["refunded_milli"] == int64(3*credits.Scale/5)
			if !found {
				t.Errorf("audit entry %+v", en)
			}
		}
	}
	if !found {
		t.Errorf("no audit entry for the deletion: %+v", es)
	}
}
