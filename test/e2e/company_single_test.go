package e2e

// GET /v1/company-enrichment (SPEC 4.6, shape decided in docs/api.md): one
// company result row; 1 credit for a valid input whatever the outcome,
// nothing for an invalid one.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

func TestCompanySingleLookup(t *testing.T) {
	a := companyStart(t)
	a.PutCompanies(coNorthwind())
	acct, key := a.Account(credits.Whole(10))
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return coSinglePath + "?" + v.Encode()
	}
	cases := []struct {
		name    string
		path    string
		result  string
		credits float64
		input   string // echoed input
		byURL   bool   // echoed as input_url too
	}{
		{"found by network URL", q("network_url", "uk.linkedin.com/company/Northwind-Traders/about"), "found", 1, "uk.linkedin.com/company/Northwind-Traders/about", true},
		{"found by domain", q("domain", "https://www.northwind.example/contact"), "found", 1, "https://www.northwind.example/contact", false},
		{"not found by network URL", q("network_url", "https://www.linkedin.com/company/nobody"), "not_found", 1, "https://www.linkedin.com/company/nobody", true},
		{"not found by domain", q("domain", "nobody.example"), "not_found", 1, "nobody.example", false},
		{"both: the network URL is used", q("network_url", "https://www.linkedin.com/company/nobody", "domain", "northwind.example"), "not_found", 1, "https://www.linkedin.com/company/nobody", true},
		{"blank network URL gives way to the domain", q("network_url", " ", "domain", "northwind.example"), "found", 1, "northwind.example", false},
		{"person profile", q("network_url", "https://www.linkedin.com/in/jane"), "invalid_url", 0, "https://www.linkedin.com/in/jane", true},
		{"network URL in the domain field", q("domain", "linkedin.com/company/northwind-traders"), "invalid_url", 0, "linkedin.com/company/northwind-traders", false},
		{"not a domain", q("domain", "northwind"), "invalid_url", 0, "northwind", false},
		{"blank", q("domain", ""), "invalid_url", 0, "", false},
	}
	spent := 0.0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := a.Balance(acct)
			resp := a.get(t, c.path, key)
			if resp.Status != http.StatusOK {
				t.Fatalf("%d %s", resp.Status, resp.Body)
			}
			var r coRow
			coDecode(t, resp.Body, &r)
			if r.Result != c.result || r.CreditsConsumed != c.credits || r.Input == nil || *r.Input != c.input || (r.InputURL != nil) != c.byURL {
				t.Fatalf("%s", r)
			}
			switch c.result {
			case "found":
				if *r.Name != "Northwind Traders" || *r.NetworkID != 4242 {
					t.Fatalf("%s", r)
				}
			case "not_found":
				coCheckEmptyData(t, r, c.byURL)
			case "invalid_url":
				if r.Reason == nil || *r.Reason == "" {
					t.Fatalf("no reason: %s", r)
				}
				coCheckEmptyData(t, r, false)
			}
			if got := before - a.Balance(acct); got != credits.Amount(c.credits*credits.Scale) {
				t.Fatalf("charged %s, row says %v", got, c.credits)
			}
			spent += c.credits
		})
	}
	coWantBalance(t, a, acct, credits.Whole(10)-credits.Amount(spent*credits.Scale))

	t.Run("neither parameter is 422", func(t *testing.T) {
		coWantValidation(t, a.get(t, coSinglePath, key), "query.network_url", "missing")
		coWantValidation(t, a.get(t, coSinglePath+"?name=Northwind", key), "query.network_url", "missing")
	})
	t.Run("a value over 2,048 characters is 422", func(t *testing.T) {
		coWantValidation(t, a.get(t, q("domain", strings.Repeat("a", 2045)+".com"), key), "query.domain", "string_too_long")
		coWantValidation(t, a.get(t, q("network_url", "https://www.linkedin.com/company/"+strings.Repeat("é", 2030)), key), "query.network_url", "string_too_long")
	})
	t.Run("without credits: 403 for a valid input, an invalid one is still free", func(t *testing.T) {
		poor, poorKey := a.Account(0)
		e := coWantError(t, a.get(t, q("domain", "northwind.example"), poorKey), http.StatusForbidden)
		if e.Code != "" || !strings.Contains(e.Detail, "balance is 0") || !strings.Contains(e.Detail, "1 required") {
			t.Fatalf("%+v", e)
		}
		if r := a.get(t, q("domain", "not a domain"), poorKey); r.Status != http.StatusOK {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		coWantBalance(t, a, poor, 0)
	})
	t.Run("no key", func(t *testing.T) {
		coWantError(t, a.get(t, q("domain", "northwind.example"), ""), http.StatusUnauthorized)
	})
	coWantBalance(t, a, acct, credits.Whole(10)-credits.Amount(spent*credits.Scale))
}

// A lookup that fails after the charge answers the generic 500 and refunds
// the credit (SPEC 2.10); the ledger shows the charge and its refund. The
// failure is real: the company's stored record is unreadable.
func TestCompanySingleLookupFailureRefunds(t *testing.T) {
	a := companyStart(t)
	a.PutCompanies(coNorthwind())
	ctx := context.Background()
	keys, err := a.Redis.Keys(ctx, "bulkd:co:r:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("record keys %v, %v", keys, err)
	}
	if err := a.Redis.Set(ctx, keys[0], "{not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	acct, key := a.Account(credits.Whole(10))
	e := coWantError(t, a.get(t, coSinglePath+"?domain=northwind.example", key), http.StatusInternalServerError)
	if e.Code != "" || !strings.Contains(e.Detail, "refunded") {
		t.Fatalf("%+v", e)
	}
	coWantBalance(t, a, acct, credits.Whole(10))
	es, err := a.Parts.API.Billing.Entries(ctx, acct, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, en := range es {
		kinds = append(kinds, en.Kind+" "+en.Amount)
	}
	if fmt.Sprint(kinds) != "[charge -1 refund 1]" {
		t.Fatalf("ledger %v, want the charge and its refund", kinds)
	}
	// A key of the other family is told so by code (SPEC 5.4).
	ukey := a.Key(acct, accounts.Unlimited)
	if e := coWantError(t, a.get(t, coSinglePath+"?domain=northwind.example", ukey), http.StatusForbidden); e.Code != "wrong_key_plan" {
		t.Fatalf("unlimited key: %+v", e)
	}
}
