package apiserver_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

var rateHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// hasRateHeaders reports whether h has the three headers, under the
// canonical name (what Go's client gives) or as the server set them (what a
// recorder gives: the map keys as written, spelled as in the spec).
func hasRateHeaders(h http.Header) bool {
	for _, n := range rateHeaders {
		if h.Get(n) == "" && len(h[n]) == 0 {
			return false
		}
	}
	return true
}

// SPEC 8: every authenticated response carries the rate-limit headers. An
// unknown /v1 path or a method a /v1 route does not take, sent with a valid
// key, is an authenticated request like any other (it also counts against
// the key's limit, which applies across all /v1/*); without a key it is a
// plain 404/405, as before.
func TestRateLimitHeadersOnUnknownV1Paths(t *testing.T) {
	api := newTestAPI(t, withRateLimit(3))
	_, payg := api.account(credits.Whole(1), accounts.PayAsYouGo)
	_, unl := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))

	for _, c := range []struct {
		method, path, key string
		status            int
	}{
		{"GET", "/v1/nothing", payg, 404},
		{"GET", "/v1", payg, 404},
		{"POST", "/v1/unlimited/nothing", unl, 404},
		{"DELETE", "/v1/credits", payg, 405},
		{"PUT", "/v1/company-enrichment/bulk", unl, 405}, // a wrong-family key still authenticates
	} {
		r := api.do(c.method, c.path, "", "X-API-Key", c.key)
		checkError(t, r, c.status, "")
		if !hasRateHeaders(r.Header) {
			t.Errorf("%s %s with a valid key: %d without rate-limit headers %v", c.method, c.path, r.Status, r.Header)
		}
	}
	// The limit (3/s) is spent by now: the 404 path counts against it.
	r := api.do("GET", "/v1/nothing", "", "X-API-Key", payg)
	checkError(t, r, 429, "rate_limited")
	if !hasRateHeaders(r.Header) || r.Header.Get("Retry-After") == "" {
		t.Fatalf("429 on an unknown path: headers %v", r.Header)
	}
	// No key, or a key that does not authenticate: a plain answer without
	// the headers (nothing was counted for anyone).
	for _, key := range []string{"", "bkd_AAAAAAAAAAAA_" + strings.Repeat("x", 40)} {
		var r response
		if key == "" {
			r = api.do("GET", "/v1/nothing", "")
		} else {
			r = api.do("GET", "/v1/nothing", "", "X-API-Key", key)
		}
		checkError(t, r, 404, "")
		if r.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("unauthenticated 404 has rate-limit headers")
		}
	}
}

// TestRateLimitHeadersOnEveryRoute sweeps every operation of the OpenAPI
// document (and checks the router has no /v1 route the document lacks) on
// a whole standalone bulkd, with a key of each kind and a method no route
// takes: every answer to a valid key carries the rate-limit headers.
func TestRateLimitHeadersOnEveryRoute(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.RateLimit = 1_000_000 }))
	acct, payg := env.Account(credits.Whole(10))
	unl := env.Key(acct, accounts.Unlimited)
	ctx := context.Background()
	if err := env.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := env.Get("/openapi.json", "")
	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	// Every /v1 route of the router is documented, so the sweep below
	// covers every handler.
	err = chi.Walk(env.Parts.API.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(route, "/")
		if strings.HasPrefix(route, "/v1/") && !documented[method+" "+route] {
			t.Errorf("%s %s is routed but not in the OpenAPI document", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var ops []string
	for op := range documented {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	job := uuid.NewString()
	seen := map[int]int{}
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		path = strings.ReplaceAll(path, "{job_id}", job)
		var body []byte
		if method == http.MethodPost {
			body = []byte(`{}`) // invalid everywhere: answered before any work is done
		}
		for _, key := range []string{payg, unl} {
			for _, m := range []string{method, http.MethodPatch} {
				var b []byte
				if m == method {
					b = body
				}
				r := env.Do(m, path, key, b)
				seen[r.Status]++
				if r.Status == 401 || !hasRateHeaders(r.Header) {
					t.Errorf("%s %s (%s key): %d without rate-limit headers: %s", m, path, keyKind(key, payg), r.Status, r.Body)
				}
			}
		}
	}
	t.Logf("%d operations swept; statuses %v", len(ops), seen)
	for _, s := range []int{403, 404, 405, 422} {
		if seen[s] == 0 {
			t.Errorf("the sweep saw no %d; it does not reach what it means to", s)
		}
	}
}

func keyKind(key, payg string) string {
	if key == payg {
		return "pay-as-you-go"
	}
	return "unlimited"
}
