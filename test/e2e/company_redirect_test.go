package e2e

// SPEC 2.4 is_redirect / redirected_to: domain rows are checked against the
// website through a local forward proxy; network URL rows never are.

import (
	"testing"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/credits"
)

func TestCompanyRedirects(t *testing.T) {
	web := coStartWebsites(t)
	web.redirect("moved.example", "http://www.newhome.example/")          // another website
	web.redirect("moved-unknown.example", "http://newhome.example/")      // another website, whose company is known
	web.redirect("oldbrand.example", "http://newbrand.example/welcome")   // another website, company known
	web.redirect("secure.example", "https://secure.example/")             // http -> https: same site
	web.redirect("bare.example", "http://www.bare.example/")              // -> www: same site
	web.redirect("shop.example", "http://www.shop.example/en/")           // -> www and a path: same site
	web.redirect("hop.example", "http://hop2.example/")                   // two hops:
	web.redirect("hop2.example", "https://www.final-stop.example/path")   // the chain ends on final-stop.example
	web.redirect("brandco.example", "https://www.linkedin.com/company/x") // a website may send visitors to the network
	a := companyStart(t, coWithWebsites(web))
	a.PutCompanies(
		company.Record{NetworkURL: new("https://www.linkedin.com/company/newhome"), Name: new("New Home"), Website: new("https://www.newhome.example")},
		company.Record{NetworkURL: new("https://www.linkedin.com/company/moved-co"), Name: new("Moved Co"), Website: new("https://moved.example")},
		company.Record{NetworkURL: new("https://www.linkedin.com/company/oldbrand"), Name: new("Old Brand"), Website: new("http://oldbrand.example")},
		company.Record{Name: new("Secure"), Website: new("https://secure.example")},
	)
	_, key := a.Account(credits.Whole(100))
	cases := []struct {
		name         string
		row          coIn
		result       string
		redirectedTo string // "" for no redirect
		company      string // name when found
	}{
		{"redirect to another website; the target company does not match", coDomain("moved.example"), "found", "newhome.example", "Moved Co"},
		{"redirect to a known company's website does not match it", coDomain("www.moved-unknown.example"), "not_found", "newhome.example", ""},
		{"known company whose website moved", coDomain("oldbrand.example"), "found", "newbrand.example", "Old Brand"},
		{"http to https is not a redirect", coDomain("secure.example"), "found", "", "Secure"},
		{"to www is not a redirect", coDomain("bare.example"), "not_found", "", ""},
		{"to www and a path is not a redirect", coDomain("shop.example"), "not_found", "", ""},
		{"a chain is followed to its end", coDomain("hop.example"), "not_found", "final-stop.example", ""},
		{"to the network itself", coDomain("brandco.example"), "not_found", "linkedin.com", ""},
		{"a website that answers is not a redirect", coDomain("newhome.example"), "found", "", "New Home"},
		{"network URL rows are never checked", coURL("https://www.linkedin.com/company/moved-co"), "found", "", "Moved Co"},
		{"network URL rows are never checked, not found", coURL("https://www.linkedin.com/company/nobody"), "not_found", "", ""},
	}
	rows := make([]coIn, len(cases))
	for i, c := range cases {
		rows[i] = c.row
	}
	sub := a.submit(t, key, rows)
	a.wait(t, key, sub.JobID)
	res := a.results(t, key, sub.JobID, 50)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := res[i]
			if r.Result != c.result || r.CreditsConsumed != 1 {
				t.Fatalf("want %s: %s", c.result, r)
			}
			if c.redirectedTo == "" {
				if r.IsRedirect || r.RedirectedTo != nil {
					t.Fatalf("want no redirect: %s", r)
				}
			} else if !r.IsRedirect || r.RedirectedTo == nil || *r.RedirectedTo != c.redirectedTo {
				t.Fatalf("want a redirect to %s: %s", c.redirectedTo, r)
			}
			if c.company != "" && (r.Name == nil || *r.Name != c.company) {
				t.Fatalf("want company %s: %s", c.company, r)
			}
			if c.result == "not_found" {
				coCheckEmptyData(t, r, c.row.NetworkURL != nil)
			}
		})
	}
	if n := web.hitsOf("www.linkedin.com") + web.hitsOf("linkedin.com"); n != 0 {
		t.Fatalf("the network's website was visited %d times; network URL rows are never checked", n)
	}

	// The single lookup reads a domain the same way.
	var r coRow
	resp := a.get(t, coSinglePath+"?domain=moved.example", key)
	coDecode(t, resp.Body, &r)
	if r.Result != "found" || !r.IsRedirect || r.RedirectedTo == nil || *r.RedirectedTo != "newhome.example" || *r.Name != "Moved Co" {
		t.Fatalf("single lookup: %s", r)
	}
}
