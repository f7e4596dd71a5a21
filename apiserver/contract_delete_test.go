package apiserver_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
)

// TestDeleteAnswersMatchOpenAPI produces the DELETE answers of every
// family's job resource that the document lists (docs/privacy.md): a job
// of each family deleted while it waits for a worker (200, with what was
// refunded), and a job id that is not one (the family's own 400 or 422).
// The contract check of every exchange validates each answer's body; the
// whole delete path is proven in test/privacy.
func TestDeleteAnswersMatchOpenAPI(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, payg := env.Account(credits.Whole(1000))
	unl := env.Key(acct, accounts.Unlimited)
	if err := env.Parts.API.Accounts.SetPlan(t.Context(), acct, accounts.PlanProfessional, accounts.StateActive, time.Time{}); err != nil {
		t.Fatal(err)
	}
	person := []map[string]string{{"first_name": "Ada", "last_name": "Lovelace", "domain": "acme.example"}}
	for _, f := range []struct {
		path, key string
		body      any
		badID     int
	}{
		{"/v1/company-enrichment/bulk", payg, map[string]any{"input": []map[string]string{{"domain": "acme.example"}}}, http.StatusUnprocessableEntity},
		{"/v1/bulk", payg, map[string]any{"emails": []string{"ada@acme.example"}}, http.StatusBadRequest},
		{"/v1/bulk-lookup", payg, map[string]any{"input": person}, http.StatusBadRequest},
		{"/v1/unlimited/bulk-lookup", unl, map[string]any{"input": person}, http.StatusBadRequest},
	} {
		r := env.PostJSON(f.path, f.key, f.body)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: submit %d: %s", f.path, r.Status, r.Body)
		}
		var sub struct {
			JobID string `json:"job_id"`
		}
		r.Decode(t, &sub)
		if d := env.Do(http.MethodDelete, f.path+"/"+sub.JobID, f.key, nil); d.Status != http.StatusOK {
			t.Fatalf("%s: DELETE %d: %s", f.path, d.Status, d.Body)
		}
		if g := env.Get(f.path+"/"+sub.JobID, f.key); g.Status != http.StatusNotFound {
			t.Fatalf("%s: GET after DELETE %d, want 404: %s", f.path, g.Status, g.Body)
		}
		if d := env.Do(http.MethodDelete, f.path+"/not-a-job-id", f.key, nil); d.Status != f.badID {
			t.Fatalf("%s: DELETE of a malformed id %d, want %d: %s", f.path, d.Status, f.badID, d.Body)
		}
	}
}
