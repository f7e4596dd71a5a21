package e2e

// SPEC 2.3, 2.5 rule 1, 4.1 and 5.7: reading a job back: paging, the
// query parameters, and who may read a job.

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// TestCompanyResultsPaging: a job of 1,234 rows (repeats, invalid rows,
// several spellings) paged with several limits, raising offset by limit
// until it reaches total_rows, gives exactly total_rows rows in submission
// order, the same rows whatever the page size, each first row of an input
// carrying its credit.
func TestCompanyResultsPaging(t *testing.T) {
	a := companyStart(t)
	a.PutCompanies(coSampleCompanies(100)...)
	acct, key := a.Account(credits.Whole(2000))
	rows, want := coSampleRows(1234)
	sub := a.submit(t, key, rows)
	st := a.wait(t, key, sub.JobID)
	if st.TotalRows != 1234 || st.TotalDistinct != int64(want.distinct) {
		t.Fatalf("status %+v", st)
	}

	var reference []coRow
	for _, limit := range []int{500, 7, 50, 333, 1} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got := a.results(t, key, sub.JobID, limit)
			if len(got) != len(rows) {
				t.Fatalf("%d rows, want %d", len(got), len(rows))
			}
			for i, r := range got {
				if coEcho(r) != coEchoOf(rows[i]) {
					t.Fatalf("row %d echoes %s, submitted %+v", i, coEcho(r), rows[i])
				}
				wantCredits := 0.0
				if want.first[i] {
					wantCredits = 1
				}
				if r.CreditsConsumed != wantCredits {
					t.Fatalf("row %d: credits %v, want %v: %s", i, r.CreditsConsumed, wantCredits, r)
				}
				var wantResult string
				switch k := want.keys[i]; {
				case k == "":
					wantResult = "invalid_url"
				case coCompanyNumber(k) < 100:
					wantResult = "found"
				default:
					wantResult = "not_found"
				}
				if r.Result != wantResult {
					t.Fatalf("row %d: %s, want %s", i, r, wantResult)
				}
			}
			if reference == nil {
				reference = got
				return
			}
			for i := range got {
				if !coSameJSON(got[i].raw, reference[i].raw) {
					t.Fatalf("row %d differs between page sizes:\n%s\n%s", i, got[i], reference[i])
				}
			}
		})
	}
	if coCreditsSum(reference) != sub.CreditsConsumed || a.Balance(acct) != credits.Whole(2000-int64(want.distinct)) {
		t.Fatalf("rows carry %v credits, submission %v, balance %s", coCreditsSum(reference), sub.CreditsConsumed, a.Balance(acct))
	}

	t.Run("defaults are limit 50 offset 0", func(t *testing.T) {
		p := a.page(t, key, sub.JobID, "")
		if p.Limit != 50 || p.Offset != 0 || len(p.Results) != 50 || p.TotalRows != 1234 || p.TotalProcessed != 1234 {
			t.Fatalf("page %+v", p)
		}
		if !coSameJSON(p.Results[49].raw, reference[49].raw) {
			t.Fatalf("default page differs")
		}
		if p := a.page(t, key, sub.JobID, "offset=1200"); p.Limit != 50 || len(p.Results) != 34 {
			t.Fatalf("offset only: limit %d, %d rows", p.Limit, len(p.Results))
		}
		if p := a.page(t, key, sub.JobID, "limit=3"); p.Offset != 0 || len(p.Results) != 3 {
			t.Fatalf("limit only: offset %d, %d rows", p.Offset, len(p.Results))
		}
	})
	t.Run("pages carry Content-Length and no-store", func(t *testing.T) {
		var first []byte
		for i := 0; i < 2; i++ { // the second read comes from the row cache
			r := a.get(t, coBulkPath+"/"+sub.JobID+"/results?offset=480&limit=500", key)
			if r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Content-Length") != fmt.Sprint(len(r.Body)) {
				t.Fatalf("read %d: %d, Cache-Control %q, Content-Length %q for %d bytes", i, r.Status, r.Header.Get("Cache-Control"), r.Header.Get("Content-Length"), len(r.Body))
			}
			if i == 0 {
				first = r.Body
			} else if string(r.Body) != string(first) {
				t.Fatal("the same page read twice differs")
			}
		}
	})
	t.Run("offsets at and past the end are empty pages", func(t *testing.T) {
		for _, q := range []string{"offset=1234", "offset=1235&limit=500", "offset=100000", fmt.Sprintf("offset=%d", math.MaxInt64), fmt.Sprintf("offset=%d&limit=500", math.MaxInt64-1)} {
			r := a.get(t, coBulkPath+"/"+sub.JobID+"/results?"+q, key)
			if r.Status != http.StatusOK {
				t.Fatalf("%s: %d %s", q, r.Status, r.Body)
			}
			var p coPage
			coDecode(t, r.Body, &p)
			if len(p.Results) != 0 || p.TotalRows != 1234 {
				t.Fatalf("%s: %d rows", q, len(p.Results))
			}
		}
	})
}

// coCompanyNumber reads the company number out of a coSampleRows key.
func coCompanyNumber(key string) int {
	var n int
	fmt.Sscanf(key[2:], "%d", &n)
	return n
}

// TestCompanyResultsParameters (SPEC 4.1 results query parameters): limit
// is 1..500 and offset at least 0; anything else is a 422 naming the
// parameter.
func TestCompanyResultsParameters(t *testing.T) {
	a := companyStart(t)
	_, key := a.Account(credits.Whole(10))
	sub := a.submit(t, key, []coIn{coDomain("a.example"), coDomain("b.example")})
	a.wait(t, key, sub.JobID)
	path := coBulkPath + "/" + sub.JobID + "/results?"
	for _, c := range []struct{ query, loc, typ string }{
		{"limit=0", "query.limit", "greater_than_equal"},
		{"limit=-1", "query.limit", "greater_than_equal"},
		{"limit=501", "query.limit", "less_than_equal"},
		{"limit=abc", "query.limit", "int_parsing"},
		{"limit=1.5", "query.limit", "int_parsing"},
		{"limit=", "query.limit", "int_parsing"},
		{"offset=-1", "query.offset", "greater_than_equal"},
		{"offset=abc", "query.offset", "int_parsing"},
		{"offset=99999999999999999999", "query.offset", "int_parsing"},
		{"limit=10&offset=-5", "query.offset", "greater_than_equal"},
	} {
		t.Run(c.query, func(t *testing.T) {
			coWantValidation(t, a.get(t, path+c.query, key), c.loc, c.typ)
		})
	}
	t.Run("both wrong", func(t *testing.T) {
		e := coWantError(t, a.get(t, path+"limit=0&offset=x", key), http.StatusUnprocessableEntity)
		if len(e.Errors) != 2 || e.Errors[0].Loc != "query.limit" || e.Errors[1].Loc != "query.offset" {
			t.Fatalf("%+v", e)
		}
	})
	for _, q := range []string{"limit=1", "limit=500", "offset=0", "limit=500&offset=0", "limit=1&offset=1"} {
		t.Run(q+" is accepted", func(t *testing.T) {
			if r := a.get(t, path+q, key); r.Status != http.StatusOK {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
		})
	}
}

// TestCompanyJobAccess (SPEC 4.1, 5.7, section 7): a job belongs to the key
// that created it. Another account's key, another key of the same account
// and an unknown job_id all get 404 Job not found on both job endpoints; a
// job_id that is not a uuid is 422 at path.job_id; no key is 401 and an
// unlimited key 403 wrong_key_plan.
func TestCompanyJobAccess(t *testing.T) {
	a := companyStart(t)
	acct, owner := a.Account(credits.Whole(10))
	sameAccount := a.Key(acct, accounts.PayAsYouGo)
	_, stranger := a.Account(credits.Whole(10))
	unlimited := a.Key(acct, accounts.Unlimited)
	sub := a.submit(t, owner, []coIn{coDomain("a.example")})
	a.wait(t, owner, sub.JobID)

	for _, suffix := range []string{"", "/results", "/results?limit=10&offset=0"} {
		job := func(id string) string { return coBulkPath + "/" + id + suffix }
		t.Run("endpoint"+strings.SplitN(suffix, "?", 2)[0], func(t *testing.T) {
			if r := a.get(t, job(sub.JobID), owner); r.Status != http.StatusOK {
				t.Fatalf("owner: %d %s", r.Status, r.Body)
			}
			if r := a.get(t, job(strings.ToUpper(sub.JobID)), owner); r.Status != http.StatusOK {
				t.Fatalf("owner, upper-case uuid: %d %s", r.Status, r.Body)
			}
			for name, c := range map[string]struct{ id, key string }{
				"another account's key":           {sub.JobID, stranger},
				"another key of the same account": {sub.JobID, sameAccount},
				"unknown job":                     {"6f1d7a38-0c7e-4d8a-9b8e-2f3a4b5c6d7e", owner},
				"nil uuid":                        {"00000000-0000-0000-0000-000000000000", owner},
			} {
				e := coWantError(t, a.get(t, job(c.id), c.key), http.StatusNotFound)
				if e.Detail != "Job not found" || e.Code != "" {
					t.Fatalf("%s: %+v", name, e)
				}
			}
			for _, id := range []string{"not-a-uuid", "12345", strings.ReplaceAll(sub.JobID, "-", ""), "{" + sub.JobID + "}",
				"urn:uuid:" + sub.JobID, sub.JobID + "0", sub.JobID[:35] + "g"} {
				e := coWantValidation(t, a.get(t, job(id), owner), "path.job_id", "uuid_parsing")
				if e.Code != "" {
					t.Fatalf("%s: %+v", id, e)
				}
			}
			e := coWantError(t, a.get(t, job(sub.JobID), ""), http.StatusUnauthorized)
			if !strings.Contains(e.Detail, "X-API-Key") {
				t.Fatalf("401: %+v", e)
			}
			e = coWantError(t, a.get(t, job(sub.JobID), unlimited), http.StatusForbidden)
			if e.Code != "wrong_key_plan" {
				t.Fatalf("unlimited key: %+v", e)
			}
		})
	}
	t.Run("submission", func(t *testing.T) {
		body := []byte(`{"input":[{"domain":"a.example"}]}`)
		coWantError(t, a.do(t, http.MethodPost, coBulkPath, "", body), http.StatusUnauthorized)
		coWantError(t, a.do(t, http.MethodPost, coBulkPath, "bkd_nope", body), http.StatusUnauthorized)
		if e := coWantError(t, a.do(t, http.MethodPost, coBulkPath, unlimited, body), http.StatusForbidden); e.Code != "wrong_key_plan" {
			t.Fatalf("%+v", e)
		}
		coWantBalance(t, a, acct, credits.Whole(9))
	})
}
