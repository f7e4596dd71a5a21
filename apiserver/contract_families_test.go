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
	"github.com/bulkd/bulkd/internal/mailworld"
)

// TestFamiliesAnswersMatchOpenAPI produces, through a whole standalone
// bulkd with its workers and a mail world on loopback, the family answers
// the rest of this package's tests leave out (the contract check of every
// exchange, and TestMain's list of unproduced answers, found them): a
// verification job from submission to its results (and its 400s, 409 while
// in progress, 422), the lookup jobs' status and results, a company single
// lookup, and a single verification that gets no verdict in time (502).
func TestFamiliesAnswersMatchOpenAPI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := mailworld.Start(ctx, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.acme.example"}, {Name: "mx.tarpit.example", Tarpit: 20 * time.Second}},
		Domains: []mailworld.Domain{
			{Name: "acme.example", MX: []string{"mx.acme.example"}, Users: []string{"ada"}},
			{Name: "tarpit.example", MX: []string{"mx.tarpit.example"}, Users: []string{"bob"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	env := bulkdtest.Start(t, bulkdtest.WithMailWorld(w), bulkdtest.WithConfig(func(c *config.Config) {
		c.RateLimit = 1_000_000
		c.UnlimitedLookupRPS = 1_000_000
		c.SMTPCommandTimeout = 30 * time.Second // the tarpit outlasts a single check's timeout
	}))
	acct, payg := env.Account(credits.Whole(1000))
	unl := env.Key(acct, accounts.Unlimited)
	if err := env.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanProfessional, accounts.StateActive, time.Time{}); err != nil {
		t.Fatal(err)
	}
	expect := func(r bulkdtest.Response, status int, what string) bulkdtest.Response {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d, want %d: %s", what, r.Status, status, r.Body)
		}
		return r
	}
	jobID := func(r bulkdtest.Response) string {
		var m struct {
			JobID string `json:"job_id"`
		}
		r.Decode(t, &m)
		return m.JobID
	}

	// Email verification, from submission to results.
	expect(env.PostJSON("/v1/bulk", payg, map[string]any{"emails": []string{}}), 400, "an empty list")
	v := jobID(expect(env.PostJSON("/v1/bulk", payg, map[string]any{"emails": []string{"ada@acme.example", "nobody@acme.example"}}), 200, "a verification job"))
	expect(env.Get("/v1/bulk/not-a-uuid", payg), 400, "a job id that is not a UUID")
	expect(env.Get("/v1/bulk/not-a-uuid/results", payg), 400, "results of a job id that is not a UUID")
	env.WaitFor("/v1/bulk/"+v, payg, 60*time.Second)
	expect(env.Get("/v1/bulk/"+v+"/results", payg), 200, "a complete job's results")
	expect(env.Get("/v1/bulk/"+v+"/results?limit=0", payg), 422, "limit 0")
	// No verdict within the single check's timeout: 502, refunded.
	expect(env.Get("/v1/verify?email=bob@tarpit.example&timeout=3", payg), 502, "a single check the tarpit outlasts")

	// Email lookup jobs, both families of keys: status and results while
	// they run (rows pending in place) and once done.
	for _, f := range []struct{ prefix, key string }{{"/v1/bulk-lookup", payg}, {"/v1/unlimited/bulk-lookup", unl}} {
		id := jobID(expect(env.PostJSON(f.prefix, f.key, map[string]any{"input": []map[string]string{
			{"first_name": "Ada", "last_name": "Lovelace", "domain": "acme.example"}}}), 200, f.prefix))
		expect(env.Get(f.prefix+"/"+id+"/results", f.key), 200, f.prefix+" results")
		env.WaitFor(f.prefix+"/"+id, f.key, 60*time.Second)
		expect(env.Get(f.prefix+"/"+id+"/results?format=csv", f.key), 200, f.prefix+" results as CSV")
	}

	// A company single lookup (no company store entry: not_found, 1 credit).
	expect(env.Get("/v1/company-enrichment?domain=acme.example", payg), 200, "a company single lookup")

	// A verification job still running: its results are 409 (SPEC 4.4).
	idle := bulkdtest.Start(t, bulkdtest.NoWorkers())
	_, k := idle.Account(credits.Whole(10))
	id := jobID(expect(idle.PostJSON("/v1/bulk", k, map[string]any{"emails": []string{"ada@acme.example"}}), 200, "a job that stays in progress"))
	expect(idle.Get("/v1/bulk/"+id+"/results", k), http.StatusConflict, "results of a job in progress")
}
