package enrich

import (
	"bytes"
	"testing"

	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/jobs"
)

// FuzzCompanyBulkBody: any body is accepted (rows classified, never more
// than 100,000), or refused with a 400/422 in the SPEC 2.10 shape. Nothing
// panics, and an accepted body has at least one valid row.
func FuzzCompanyBulkBody(fz *testing.F) {
	for _, s := range []string{
		`{"input":[{"network_url":"linkedin.com/company/acme"}]}`,
		`{"input":[{"domain":"acme.example"},{"domain":"ACME.example."},{"network_url":null,"domain":"x"}]}`,
		`{"input":[]}`, `{"input":{}}`, `{"input":[1,"a",null]}`, `{"other":1,"input":[{"domain":"a.example"}]}`,
		`{"input":[{"domain":5}]}`, `[]`, `{"input":[{"network_url":"https://www.linkedin.com/in/x"}]}`,
		`{"input":[{"domain":"a.example"}]} trailing`, `{"input":[{"domain":"\ud800.example"}]}`,
	} {
		fz.Add([]byte(s))
	}
	f := NewFamily(normalize.New(normalize.DefaultHosts), nil)
	fz.Fuzz(func(t *testing.T, body []byte) {
		b := jobs.NewBuilder("company_enrichment", 0)
		e := decodeBody(f, bytes.NewReader(body), b)
		if e == nil {
			if b.Distinct() == 0 || b.Rows() > MaxRows || int64(b.Rows()) < b.Invalid() {
				t.Fatalf("accepted a body with %d rows, %d distinct", b.Rows(), b.Distinct())
			}
			return
		}
		if e.Status != 400 && e.Status != 422 {
			t.Fatalf("status %d for %q", e.Status, body)
		}
		if e.Detail == "" || (e.Status == 422) != (len(e.Errors) > 0) {
			t.Fatalf("bad error %+v", e)
		}
		if len(e.Errors) == 1 && e.Detail != e.Errors[0].Msg {
			t.Fatalf("single-item detail %q != %q", e.Detail, e.Errors[0].Msg)
		}
	})
}
