package apiserver_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/apicontract"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/serve"
)

// Issue 18 item 6: reading a company job's results through another
// family's mount answers 404 and leaves nothing behind: the row cache is
// never filled with rows rendered in the wrong family's shape, so the
// company mount (and the dashboard) then serve exactly what a fresh read
// from Redis renders.
func TestResultsOfAnotherFamilyDoNotFillTheCache(t *testing.T) {
	e := bulkdtest.Start(t) // the row cache is on (--results-cache-bytes' default)
	if e.Parts.Engine.RowCache == nil {
		t.Fatal("the row cache is off; this test needs it")
	}
	str := func(s string) *string { return &s }
	e.PutCompanies(company.Record{NetworkURL: str("https://www.linkedin.com/company/northwind-traders"), Name: str("Northwind Traders"),
		Website: str("https://northwind.example"), Domain: str("northwind.example")})
	_, key := e.Account(100 * credits.Scale)
	r := e.PostJSON("/v1/company-enrichment/bulk", key, map[string]any{"input": []map[string]string{
		{"network_url": "https://www.linkedin.com/company/northwind-traders"}, {"domain": "nope.example"}, {"domain": "not a domain"}}})
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	e.WaitFor("/v1/company-enrichment/bulk/"+sub.JobID, key, 20*time.Second)

	// The same job id through every other family's mount: 404, JSON and CSV.
	for _, p := range []string{"/v1/bulk/", "/v1/bulk-lookup/"} {
		for _, q := range []string{"", "?format=csv", "?offset=1&limit=1"} {
			if r := e.Get(p+sub.JobID+"/results"+q, key); r.Status != http.StatusNotFound {
				t.Fatalf("%s...%s: %d %s", p, q, r.Status, r.Body)
			}
		}
	}
	if s := e.Parts.Engine.RowCache.Stats(); s.Chunks != 0 {
		t.Errorf("a 404 left %d chunk(s) in the row cache", s.Chunks)
	}

	cached := e.Get("/v1/company-enrichment/bulk/"+sub.JobID+"/results", key)
	cachedCSV := e.Get("/v1/company-enrichment/bulk/"+sub.JobID+"/results?format=csv", key)
	// A fresh read: the same requests to a second replica on the same
	// Redis without a row cache, which renders from Redis.
	cfg := e.Config
	cfg.ResultsCacheBytes = 0
	replica, err := serve.BuildWith(cfg, e.Redis, slog.New(slog.NewTextHandler(io.Discard, nil)), serve.Options{Now: e.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if replica.Engine.RowCache != nil {
		t.Fatal("the replica has a row cache")
	}
	ts := httptest.NewServer(apicontract.Serve(t, replica.API))
	defer ts.Close()
	get := func(path string) bulkdtest.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Header.Set("X-API-Key", key)
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return bulkdtest.Response{Status: res.StatusCode, Body: b, Header: res.Header}
	}
	fresh := get("/v1/company-enrichment/bulk/" + sub.JobID + "/results")
	freshCSV := get("/v1/company-enrichment/bulk/" + sub.JobID + "/results?format=csv")

	if cached.Status != http.StatusOK || fresh.Status != http.StatusOK || string(cached.Body) != string(fresh.Body) {
		t.Fatalf("company results after the 404s (%d):\n%s\nfresh read (%d):\n%s", cached.Status, cached.Body, fresh.Status, fresh.Body)
	}
	if cachedCSV.Status != http.StatusOK || string(cachedCSV.Body) != string(freshCSV.Body) {
		t.Fatalf("CSV after the 404s:\n%s\nfresh:\n%s", cachedCSV.Body, freshCSV.Body)
	}
	// Company-shaped: every row has the company fields, none has the
	// verification or lookup ones.
	var page struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(cached.Body, &page); err != nil || len(page.Results) != 3 {
		t.Fatalf("page: %v\n%s", err, cached.Body)
	}
	for i, row := range page.Results {
		if _, ok := row["email"]; ok {
			t.Errorf("row %d is verification-shaped: %v", i, row)
		}
		if _, ok := row["domain"]; !ok {
			t.Errorf("row %d has no domain field: %v", i, row)
		}
	}
	if !strings.Contains(string(cached.Body), "Northwind Traders") {
		t.Errorf("the found company is missing:\n%s", cached.Body)
	}
}
