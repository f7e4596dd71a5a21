package e2e

// Results as CSV (GET .../results?format=csv) for every family: the same
// rows as the JSON pages, in the same order, with the same 404, 409 and 422
// rules.

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
)

// jsonResults reads every row of a job through the JSON pages.
func (a *companyAPI) jsonResults(t *testing.T, resultsPath, key string) []map[string]json.RawMessage {
	t.Helper()
	var all []map[string]json.RawMessage
	for off := 0; ; off += 500 {
		r := a.get(t, fmt.Sprintf("%s?limit=500&offset=%d", resultsPath, off), key)
		if r.Status != http.StatusOK {
			t.Fatalf("json results: %d %s", r.Status, r.Body)
		}
		var page struct {
			TotalRows int                          `json:"total_rows"`
			Results   []map[string]json.RawMessage `json:"results"`
		}
		dec := json.NewDecoder(bytes.NewReader(r.Body))
		dec.UseNumber()
		if err := dec.Decode(&page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Results...)
		if off+500 >= page.TotalRows {
			return all
		}
	}
}

// csvResults downloads a job's results as CSV and parses them.
func (a *companyAPI) csvResults(t *testing.T, resultsPath, key, query string) (header []string, rows [][]string) {
	t.Helper()
	r := a.get(t, resultsPath+"?format=csv"+query, key)
	if r.Status != http.StatusOK {
		t.Fatalf("csv results: %d %s", r.Status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if cd := r.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment; filename=") || !strings.HasSuffix(cd, `.csv"`) {
		t.Errorf("Content-Disposition %q", cd)
	}
	recs, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("csv: %v (%d records)", err, len(recs))
	}
	return recs[0], recs[1:]
}

// csvField is what a JSON value must read as in the CSV: empty for null,
// a string as itself (an apostrophe before one a spreadsheet would run as
// a formula), anything else as its compact JSON.
func csvField(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return ""
	}
	if v[0] == '"' {
		var s string
		_ = json.Unmarshal(v, &s)
		if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
			return "'" + s
		}
		return s
	}
	var b bytes.Buffer
	_ = json.Compact(&b, v)
	return b.String()
}

// checkCSVMatchesJSON downloads a job's results both ways and requires the
// same rows in the same order: the header names every field of the JSON
// rows, and every cell reads as its JSON value.
func checkCSVMatchesJSON(t *testing.T, a *companyAPI, resultsPath, key string) int {
	t.Helper()
	want := a.jsonResults(t, resultsPath, key)
	header, rows := a.csvResults(t, resultsPath, key, "")
	if len(rows) != len(want) {
		t.Fatalf("csv has %d rows, json %d", len(rows), len(want))
	}
	cols := map[string]bool{}
	for _, c := range header {
		cols[c] = true
	}
	for i, row := range want {
		for k := range row {
			if !cols[k] {
				t.Fatalf("json field %q of row %d is not a csv column (%v)", k, i, header)
			}
		}
		for j, c := range header {
			if got, w := rows[i][j], csvField(row[c]); got != w {
				t.Fatalf("row %d column %s: csv %q, json %s", i, c, got, row[c])
			}
		}
	}
	// From an offset: the rest, in order (a cut download resumes there).
	if len(want) > 1 {
		_, tail := a.csvResults(t, resultsPath, key, fmt.Sprintf("&offset=%d", len(want)-1))
		if len(tail) != 1 || strings.Join(tail[0], ",") != strings.Join(rows[len(rows)-1], ",") {
			t.Fatalf("csv from the last offset: %v", tail)
		}
	}
	return len(rows)
}

// Company enrichment: 1,200 rows (three CSV pages), found and not found,
// repeats and invalid rows; and the errors.
func TestCompanyResultsCSV(t *testing.T) {
	a := companyStart(t)
	a.PutCompanies(coSampleCompanies(300)...)
	_, key := a.Account(credits.Whole(10_000))
	rows, _ := coSampleRows(1200)
	rows[1] = coDomain("=cmd.example") // not a domain: invalid, echoed as given
	sub := a.submit(t, key, rows)
	a.wait(t, key, sub.JobID)
	path := coBulkPath + "/" + sub.JobID + "/results"
	if n := checkCSVMatchesJSON(t, a, path, key); n != 1200 {
		t.Fatalf("%d rows", n)
	}
	header, csvRows := a.csvResults(t, path, key, "")
	for j, c := range header {
		if c == "input" && csvRows[1][j] != "'=cmd.example" {
			t.Errorf("a formula-like input reads %q, want it behind an apostrophe", csvRows[1][j])
		}
	}

	coWantValidation(t, a.get(t, path+"?format=xml", key), "query.format", "literal_error")
	coWantValidation(t, a.get(t, path+"?format=csv&limit=10", key), "query.limit", "value_error")
	coWantError(t, a.get(t, coBulkPath+"/00000000-0000-0000-0000-000000000000/results?format=csv", key), http.StatusNotFound)
	_, other := a.Account(credits.Whole(1))
	coWantError(t, a.get(t, path+"?format=csv", other), http.StatusNotFound)
}

// Email verification: the same rows both ways once complete; 409 naming
// the status before, as for JSON.
func TestVerificationResultsCSV(t *testing.T) {
	env, w := verifyStart(t)
	_, key := env.Account(credits.Whole(100))
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	r := env.post(t, "/v1/bulk", key, map[string]any{"emails": emails})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	path := "/v1/bulk/" + sub.JobID + "/results"
	// The tarpit holds the first pass: still in progress.
	if r := env.get(t, path+"?format=csv", key); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "in_progress") {
		t.Fatalf("csv while in progress: %d %s", r.Status, r.Body)
	}
	waitVerification(t, env, key, sub.JobID)
	if n := checkCSVMatchesJSON(t, env, path, key); n != len(emails) {
		t.Fatalf("%d rows for %d addresses", n, len(emails))
	}
}

// Email lookup, pay-as-you-go and unlimited paths.
func TestLookupResultsCSV(t *testing.T) {
	env, w := lookupStart(t)
	_, key := env.Account(credits.Whole(1000))
	rows := w.rows()
	sub := env.lookupSubmit(t, "/v1/bulk-lookup", key, rows)
	env.lookupWait(t, "/v1/bulk-lookup", key, sub.JobID)
	if n := checkCSVMatchesJSON(t, env, "/v1/bulk-lookup/"+sub.JobID+"/results", key); n != sub.TotalRows {
		t.Fatalf("%d rows, want %d", n, sub.TotalRows)
	}
}

// waitVerification polls a verification job until it is complete.
func waitVerification(t *testing.T, env *companyAPI, key, id string) {
	t.Helper()
	bulkdtest.Eventually(t, 30*time.Second, 50*time.Millisecond, "verification complete", func() bool {
		var st struct {
			Status string `json:"status"`
		}
		env.get(t, "/v1/bulk/"+id, key).Decode(t, &st)
		return st.Status == "complete"
	})
}
