package e2e

import (
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/credits"
)

func TestCompanySmoke(t *testing.T) {
	env := bulkdtest.Start(t)
	env.PutCompanies(company.Record{Name: bulkdtest.Str("Northwind Traders"), NetworkURL: bulkdtest.Str("https://www.linkedin.com/company/northwind-traders"),
		Website: bulkdtest.Str("https://www.northwind.example"), Domain: bulkdtest.Str("northwind.example")})
	acct, key := env.Account(credits.Whole(10))
	body := map[string]any{"input": []map[string]any{
		{"network_url": "linkedin.com/company/northwind-traders/about"},
		{"network_url": "https://www.linkedin.com/company/northwind-traders"},
		{"domain": "northwind.example"},
		{"domain": "nobody.example"},
		{"network_url": "https://www.linkedin.com/in/someone"},
	}}
	r := env.PostJSON("/v1/company-enrichment/bulk", key, body)
	t.Logf("%d %s", r.Status, r.Body)
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	st := env.WaitFor("/v1/company-enrichment/bulk/"+sub.JobID, key, 10*time.Second)
	t.Logf("%v", st)
	res := env.Get("/v1/company-enrichment/bulk/"+sub.JobID+"/results", key)
	t.Logf("%s", res.Body)
	t.Logf("balance %s", env.Balance(acct))
}
