// Package lookupapi is the email-lookup API as the test suites see it
// (test/e2e standalone, test/kube on envtest, test/cluster on a real
// cluster): the submitted row, the results row and the status answer.
package lookupapi

import (
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// In is one submitted row.
type In struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Domain    string `json:"domain"`
}

// Row is a results row; a single lookup's answer adds CreditsConsumed.
type Row struct {
	Status          string          `json:"status"`
	Substatus       string          `json:"substatus"`
	Email           *string         `json:"email"`
	EmailProvider   *string         `json:"email_provider"`
	MXRecord        *string         `json:"mx_record"`
	IsCatchAll      *bool           `json:"is_catch_all"`
	IsRole          *bool           `json:"is_role"`
	IsFree          *bool           `json:"is_free"`
	IsDisposable    *bool           `json:"is_disposable"`
	Confidence      *int            `json:"confidence"`
	FirstName       string          `json:"first_name"`
	LastName        string          `json:"last_name"`
	Domain          string          `json:"domain"`
	CreditsConsumed *credits.Amount `json:"credits_consumed"`
}

// Status is GET /v1/bulk-lookup/{job_id} (and its unlimited twin).
type Status struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	Summary         map[string]int64 `json:"summary"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

// Tally is what CheckAgainstTruth counted.
type Tally struct {
	Found         int // rows found (verified or catch-all)
	Findable      int // people the world says a finder can prove
	FoundFindable int // of them, found verified at the true address
	GreyFound     int // of those, on a greylisting domain
	CatchAll      int // people on catch-all domains
}

// CheckAgainstTruth compares the final results rows of a job with the
// world's truth, row i with people[i] (rows come in submission order): the
// echo is the person's; a findable person is found verified at the true
// address; nobody gets an address (someone else's or a made-up one) on a
// domain that is not catch-all; a catch-all answer is never "verified"
// and never trusted as proven; mail-less domains say why; a found row has
// its enrichment fields and a not_found row none.
func CheckAgainstTruth(t testing.TB, people []mailworld.PersonCase, rows []Row) Tally {
	t.Helper()
	var n Tally
	if len(rows) != len(people) {
		t.Fatalf("%d result rows, want %d", len(rows), len(people))
	}
	for i, row := range rows {
		p := people[i]
		if row.FirstName != p.FirstName || row.LastName != p.LastName || row.Domain != p.Domain {
			t.Errorf("row %d echoes %q %q %q, submitted %q %q %q", i, row.FirstName, row.LastName, row.Domain, p.FirstName, p.LastName, p.Domain)
			continue
		}
		email := ""
		if row.Email != nil {
			email = *row.Email
		}
		switch row.Status {
		case "found":
			n.Found++
			if row.Email == nil || row.MXRecord == nil || row.EmailProvider == nil || row.Confidence == nil || row.IsCatchAll == nil || row.IsRole == nil {
				t.Errorf("found row without its enrichment fields: %+v", row)
			}
		case "not_found":
			if row.Email != nil || row.EmailProvider != nil || row.MXRecord != nil || row.Confidence != nil || row.IsCatchAll != nil {
				t.Errorf("not_found row with enrichment fields: %+v", row)
			}
		default:
			t.Errorf("row %d: %+v, want found or not_found", i, row)
		}
		switch {
		case p.Findable:
			n.Findable++
			if row.Status == "found" && row.Substatus == "verified" && email == p.Email {
				n.FoundFindable++
				if p.Greylisted {
					n.GreyFound++
				}
			} else {
				t.Errorf("%s %s @%s (greylisted %v): %s/%s %q, want found/verified %q", p.FirstName, p.LastName, p.Domain, p.Greylisted,
					row.Status, row.Substatus, email, p.Email)
			}
		case p.CatchAll:
			n.CatchAll++
			if row.Status == "found" && (row.Substatus == "verified" || row.IsCatchAll == nil || !*row.IsCatchAll || row.Confidence == nil || *row.Confidence >= 90) {
				t.Errorf("catch-all %s @%s: %+v", p.FirstName, p.Domain, row)
			}
		case p.Reason != "":
			if row.Status != "not_found" || row.Substatus != p.Reason {
				t.Errorf("%s @%s: %s/%s, want not_found/%s", p.FirstName, p.Domain, row.Status, row.Substatus, p.Reason)
			}
		default: // not at the domain: no address, least of all someone else's
			if row.Status == "found" {
				t.Errorf("WRONG ADDRESS %s %s @%s: %q (the person has %q)", p.FirstName, p.LastName, p.Domain, email, p.Email)
			}
		}
	}
	return n
}
