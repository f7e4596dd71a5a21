package apiserver_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/ratelimit"
	"github.com/bulkd/bulkd/internal/serve"
)

// fakeFinder answers by domain: found.example is found (verified, every
// enrichment field set), grey.example cannot be told (not_found/unknown,
// the single lookups' 502), anything else is not_found/no_match.
type fakeFinder struct{}

func (fakeFinder) Find(_ context.Context, people []finder.Person) []finder.Result {
	out := make([]finder.Result, len(people))
	for i, p := range people {
		switch strings.ToLower(p.Domain) {
		case "found.example":
			email := strings.ToLower(p.FirstName+"."+p.LastName) + "@found.example"
			prov, mx := "google", "aspmx.l.google.com"
			catchAll, role, free, disp := false, false, false, false
			conf := 95
			out[i] = finder.Result{Status: finder.StatusFound, Substatus: finder.SubVerified, Email: &email,
				EmailProvider: &prov, MXRecord: &mx, IsCatchAll: &catchAll, IsRole: &role, IsFree: &free,
				IsDisposable: &disp, Confidence: &conf}
		case "grey.example":
			out[i] = finder.Result{Status: finder.StatusNotFound, Substatus: finder.SubUnknown, Temporary: true}
		default:
			out[i] = finder.Result{Status: finder.StatusNotFound, Substatus: finder.SubNoMatch}
		}
	}
	return out
}

// withLookup mounts the email lookup endpoints as internal/serve does, with
// fakeFinder behind them, no job engine (enough for the bulk answers that
// come before any work), an account limit of rps single lookups per second
// and a monthly single-lookup cap of 2 on the starter plan.
func withLookup(rps int) option { return withLookupFinder(rps, fakeFinder{}) }

// withLookupFinder is withLookup with f behind the single lookups.
func withLookupFinder(rps int, f lookup.Finder) option {
	return func(d *apiserver.Deps) {
		fam := lookup.New(fakeFinder{}, nil)
		d.Bulk = append(d.Bulk,
			apiserver.Bulk{Path: "/bulk-lookup", Family: fam, Keys: apiserver.Metered},
			apiserver.Bulk{Path: "/unlimited/bulk-lookup", Family: fam, Keys: apiserver.UnlimitedPlan})
		d.Singles = append(d.Singles, serve.LookupSingles(&lookup.Single{Finder: f, Timeout: 5 * time.Second},
			ratelimit.New(d.Redis, rps))...)
		plans := billing.DefaultPlans()
		starter := plans[accounts.PlanStarter]
		starter.MonthlySingleLookups = 2
		plans[accounts.PlanStarter] = starter
		d.Plans = plans
	}
}

const (
	lookupFound  = `{"first_name":"Ada","last_name":"Lovelace","domain":"found.example"}`
	lookupNobody = `{"first_name":"Ada","last_name":"Lovelace","domain":"nobody.example"}`
	lookupGrey   = `{"first_name":"Ada","last_name":"Lovelace","domain":"grey.example"}`
)

// TestLookupAnswersMatchOpenAPI validates every answer of the single email
// lookups, and the bulk lookup answers that come before the job engine
// (authentication, key family, request validation), against the document;
// it also checks what each answer costs.
func TestLookupAnswersMatchOpenAPI(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	oc := newOpenAPIChecker(t, api)
	_, payg := api.account(credits.Whole(2), accounts.PayAsYouGo)
	_, unl := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))
	_, lapsed := api.unlimitedAccount(accounts.PlanStarter, accounts.StateLapsed, api.Clock.Now().Add(time.Hour))
	const job = "6f1d7a38-0c7e-4d8a-9b8e-2f3a4b5c6d7e"
	long := strings.Repeat("é", 256)
	var tooMany strings.Builder
	tooMany.WriteString(`{"input":[`)
	for i := range lookup.MaxRows + 1 {
		if i > 0 {
			tooMany.WriteByte(',')
		}
		tooMany.WriteString(`{"first_name":"a` + strconv.Itoa(i) + `","last_name":"b","domain":"c.example"}`)
	}
	tooMany.WriteString(`]}`)

	type ex struct {
		method, path, body, key string
		status                  int
		code                    string
	}
	run := func(e ex) response {
		t.Helper()
		var r response
		if e.key != "" {
			r = api.do(e.method, e.path, e.body, "X-API-Key", e.key)
		} else {
			r = api.do(e.method, e.path, e.body)
		}
		if r.Status != e.status {
			t.Fatalf("%s %s: %d, want %d: %s", e.method, e.path, r.Status, e.status, r.Body)
		}
		if r.Status != 200 {
			checkError(t, r, e.status, e.code)
		}
		oc.check(e.method, api.URL+e.path, e.body, r)
		return r
	}
	balance := func() float64 {
		t.Helper()
		return api.get("/v1/credits", payg).JSON(t)["credits"].(float64)
	}
	singleUsed := func() float64 {
		t.Helper()
		return run(ex{"GET", "/v1/unlimited/usage", "", unl, 200, ""}).JSON(t)["single_lookups_used"].(float64)
	}

	for _, e := range []ex{
		// Bulk, credit-metered.
		{"POST", "/v1/bulk-lookup", `{"input":[]}`, payg, 400, ""},
		{"POST", "/v1/bulk-lookup", `{"input":[`, payg, 400, ""},
		{"POST", "/v1/bulk-lookup", `{"input":[{"first_name":"a","last_name":"b"},{"first_name":1,"last_name":"b","domain":"c"},"x"]}`, payg, 422, ""},
		{"POST", "/v1/bulk-lookup", `{"input":[{"first_name":"` + long + `","last_name":"b","domain":"c"}]}`, payg, 422, ""},
		{"POST", "/v1/bulk-lookup", `{"input":"x"}`, payg, 422, ""},
		{"POST", "/v1/bulk-lookup", tooMany.String(), payg, 422, ""},
		{"POST", "/v1/bulk-lookup", `{"input":[]}`, "", 401, ""},
		{"POST", "/v1/bulk-lookup", `{"input":[]}`, unl, 403, "wrong_key_plan"},
		{"GET", "/v1/bulk-lookup/not-a-uuid", "", payg, 400, ""},
		{"GET", "/v1/bulk-lookup/" + job, "", "", 401, ""},
		{"GET", "/v1/bulk-lookup/" + job, "", unl, 403, "wrong_key_plan"},
		{"GET", "/v1/bulk-lookup/not-a-uuid/results", "", payg, 400, ""},
		{"GET", "/v1/bulk-lookup/" + job + "/results?limit=0&offset=x", "", payg, 422, ""},
		{"GET", "/v1/bulk-lookup/" + job + "/results", "", unl, 403, "wrong_key_plan"},
		// Bulk, unlimited plan.
		{"POST", "/v1/unlimited/bulk-lookup", `{"input":[]}`, unl, 400, ""},
		{"POST", "/v1/unlimited/bulk-lookup", `{"input":[{"domain":"c"}]}`, unl, 422, ""},
		{"POST", "/v1/unlimited/bulk-lookup", `{"input":[]}`, payg, 403, "wrong_key_plan"},
		{"POST", "/v1/unlimited/bulk-lookup", `{"input":[]}`, lapsed, 402, "subscription_inactive"},
		{"POST", "/v1/unlimited/bulk-lookup", `{"input":[]}`, "", 401, ""},
		{"GET", "/v1/unlimited/bulk-lookup/not-a-uuid", "", unl, 400, ""},
		{"GET", "/v1/unlimited/bulk-lookup/" + job, "", lapsed, 402, "subscription_inactive"},
		{"GET", "/v1/unlimited/bulk-lookup/" + job, "", payg, 403, "wrong_key_plan"},
		{"GET", "/v1/unlimited/bulk-lookup/not-a-uuid/results", "", unl, 400, ""},
		{"GET", "/v1/unlimited/bulk-lookup/" + job + "/results?limit=501", "", unl, 422, ""},
		{"GET", "/v1/unlimited/bulk-lookup/" + job + "/results", "", lapsed, 402, "subscription_inactive"},
		// Single, credit-metered: errors that cost nothing.
		{"POST", "/v1/email-lookup", `{`, payg, 400, ""},
		{"POST", "/v1/email-lookup", ``, payg, 400, ""},
		{"POST", "/v1/email-lookup", `{"first_name":"Ada"}`, payg, 422, ""},
		{"POST", "/v1/email-lookup", `{"first_name":1,"last_name":"b","domain":"c"}`, payg, 422, ""},
		{"POST", "/v1/email-lookup", `{"first_name":"a","last_name":"b","domain":"` + long + `"}`, payg, 422, ""},
		{"POST", "/v1/email-lookup", `[]`, payg, 422, ""},
		{"POST", "/v1/email-lookup", lookupFound, "", 401, ""},
		{"POST", "/v1/email-lookup", lookupFound, unl, 403, "wrong_key_plan"},
		// Single, unlimited plan: errors that count nothing.
		{"POST", "/v1/unlimited/email-lookup", `{`, unl, 400, ""},
		{"POST", "/v1/unlimited/email-lookup", `{"last_name":"b","domain":"c"}`, unl, 422, ""},
		{"POST", "/v1/unlimited/email-lookup", lookupFound, "", 401, ""},
		{"POST", "/v1/unlimited/email-lookup", lookupFound, payg, 403, "wrong_key_plan"},
		{"POST", "/v1/unlimited/email-lookup", lookupFound, lapsed, 402, "subscription_inactive"},
	} {
		run(e)
	}
	if b := balance(); b != 2 {
		t.Fatalf("balance %v after answers that cost nothing, want 2", b)
	}

	// Credit-metered single lookups: 502 refunded, 200s charged 1 credit
	// (not_found included), then 403 with nothing left.
	run(ex{"POST", "/v1/email-lookup", lookupGrey, payg, 502, ""})
	if b := balance(); b != 2 {
		t.Fatalf("balance %v after a 502, want 2 (refunded)", b)
	}
	m := run(ex{"POST", "/v1/email-lookup", lookupFound, payg, 200, ""}).JSON(t)
	if m["status"] != "found" || m["email"] != "ada.lovelace@found.example" || m["credits_consumed"] != float64(1) || m["first_name"] != "Ada" {
		t.Fatalf("found answer %v", m)
	}
	m = run(ex{"POST", "/v1/email-lookup", lookupNobody, payg, 200, ""}).JSON(t)
	if m["status"] != "not_found" || m["email"] != nil || m["credits_consumed"] != float64(1) {
		t.Fatalf("not_found answer %v", m)
	}
	run(ex{"POST", "/v1/email-lookup", lookupFound, payg, 403, ""})
	if b := balance(); b != 0 {
		t.Fatalf("balance %v, want 0", b)
	}

	// Unlimited single lookups: 502 releases its count; the starter cap of
	// 2 then answers 429 monthly_quota_exceeded until the period ends.
	run(ex{"POST", "/v1/unlimited/email-lookup", lookupGrey, unl, 502, ""})
	if n := singleUsed(); n != 0 {
		t.Fatalf("single_lookups_used %v after a 502, want 0 (released)", n)
	}
	m = run(ex{"POST", "/v1/unlimited/email-lookup", lookupFound, unl, 200, ""}).JSON(t)
	if m["status"] != "found" || m["credits_consumed"] != float64(0) {
		t.Fatalf("unlimited answer %v", m)
	}
	run(ex{"POST", "/v1/unlimited/email-lookup", lookupNobody, unl, 200, ""})
	r := run(ex{"POST", "/v1/unlimited/email-lookup", lookupFound, unl, 429, "monthly_quota_exceeded"})
	// The period end is stored in whole seconds and Retry-After rounds up,
	// so an hour measured on the harness clock reads 3600 at most.
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 3000 || ra > 3600 {
		t.Fatalf("Retry-After %q, want the seconds to the period end (about 3600)", r.Header.Get("Retry-After"))
	}
	if n := singleUsed(); n != 2 {
		t.Fatalf("single_lookups_used %v, want 2", n)
	}
}

// TestUnlimitedLookupAccountRateLimitMatchesOpenAPI: the per-account limit
// of unlimited single lookups answers 429 rate_limited with Retry-After.
func TestUnlimitedLookupAccountRateLimitMatchesOpenAPI(t *testing.T) {
	api := newTestAPI(t, withLookup(2))
	oc := newOpenAPIChecker(t, api)
	_, unl := api.unlimitedAccount(accounts.PlanProfessional, accounts.StateActive, api.Clock.Now().Add(time.Hour))
	for range 20 {
		r := api.do("POST", "/v1/unlimited/email-lookup", lookupFound, "X-API-Key", unl)
		oc.check("POST", api.URL+"/v1/unlimited/email-lookup", lookupFound, r)
		if r.Status == 429 {
			checkError(t, r, 429, "rate_limited")
			if r.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
			return
		}
		if r.Status != 200 {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
	}
	t.Fatal("no 429 after 20 lookups at an account limit of 2 per second")
}

// TestOpenAPILookupContract pins what the document promises about the email
// lookup endpoints (SPEC 2.7, 4.2, 4.3, sections 7 and 8): the operations
// and every answer each can give, the parameters and body limits, and lookup
// rows whose every field is required, nothing else allowed, the enrichment
// fields nullable and the substatuses the code gives.
func TestOpenAPILookupContract(t *testing.T) {
	api := newTestAPI(t)
	doc := newOpenAPIChecker(t, api).doc
	metered := []string{"400", "401", "403", "422", "429", "500"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	ops := map[string]struct {
		method    string
		responses []string
	}{
		"/v1/bulk-lookup":                            {"POST", with(metered, "200", "408", "409", "503")},
		"/v1/bulk-lookup/{job_id}":                   {"GET", []string{"200", "400", "401", "403", "404", "429", "500", "503"}},
		"/v1/bulk-lookup/{job_id}/results":           {"GET", with(metered, "200", "404", "503")},
		"/v1/unlimited/bulk-lookup":                  {"POST", with(metered, "200", "402", "408", "409", "503")},
		"/v1/unlimited/bulk-lookup/{job_id}":         {"GET", []string{"200", "400", "401", "402", "403", "404", "429", "500", "503"}},
		"/v1/unlimited/bulk-lookup/{job_id}/results": {"GET", with(metered, "200", "402", "404", "503")},
		"/v1/email-lookup":                           {"POST", with(metered, "200", "408", "409", "502", "503")},
		"/v1/unlimited/email-lookup":                 {"POST", with(metered, "200", "402", "408", "409", "502", "503")},
	}
	for path, want := range ops {
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(want.method) == nil {
			t.Fatalf("%s %s is not documented", want.method, path)
		}
		op := item.GetOperation(want.method)
		for _, code := range want.responses {
			if op.Responses.Value(code) == nil {
				t.Errorf("%s %s: no %s answer documented", want.method, path, code)
			}
		}
		if len(op.Responses.Map()) != len(want.responses) {
			t.Errorf("%s %s documents %d answers, want exactly %v", want.method, path, len(op.Responses.Map()), want.responses)
		}
		if r := op.Responses.Value("429"); r != nil && r.Value.Headers["Retry-After"] == nil {
			t.Errorf("%s %s: 429 without Retry-After", want.method, path)
		}
	}
	for _, prefix := range []string{"/v1/bulk-lookup", "/v1/unlimited/bulk-lookup"} {
		for _, path := range []string{prefix + "/{job_id}", prefix + "/{job_id}/results"} {
			m := map[string]*openapi3.Parameter{}
			for _, p := range doc.Paths.Find(path).Get.Parameters {
				m[p.Value.Name] = p.Value
			}
			if p := m["job_id"]; p == nil || p.In != "path" || !p.Required || p.Schema.Value.Format != "uuid" {
				t.Errorf("%s: job_id %+v", path, p)
			}
			if !strings.HasSuffix(path, "/results") {
				continue
			}
			limit, offset := m["limit"], m["offset"]
			if limit == nil || limit.In != "query" || limit.Required || *limit.Schema.Value.Min != 1 || *limit.Schema.Value.Max != 500 || limit.Schema.Value.Default != float64(50) {
				t.Errorf("%s: limit must be an optional query integer 1..500, default 50", path)
			}
			if offset == nil || offset.In != "query" || offset.Required || *offset.Schema.Value.Min != 0 || offset.Schema.Value.Max != nil || offset.Schema.Value.Default != float64(0) {
				t.Errorf("%s: offset must be an optional query integer >= 0, default 0", path)
			}
		}
	}

	schemas := doc.Components.Schemas
	person := func(name string, s *openapi3.Schema) {
		t.Helper()
		if len(s.Required) != 3 {
			t.Errorf("%s: required %v", name, s.Required)
		}
		for _, f := range []string{"first_name", "last_name", "domain"} {
			p := s.Properties[f]
			if p == nil || !p.Value.Type.Is("string") || p.Value.MaxLength == nil || *p.Value.MaxLength != uint64(lookup.MaxFieldLen) {
				t.Errorf("%s.%s must be a string of at most %d characters", name, f, lookup.MaxFieldLen)
			}
		}
	}
	input := schemas["LookupBulkRequest"].Value.Properties["input"].Value
	if input.MinItems != 1 || input.MaxItems == nil || *input.MaxItems != uint64(lookup.MaxRows) {
		t.Errorf("input must hold 1 to %d rows", lookup.MaxRows)
	}
	person("LookupBulkRequest.input item", input.Items.Value)
	for _, path := range []string{"/v1/email-lookup", "/v1/unlimited/email-lookup"} {
		person(path+" body", doc.Paths.Find(path).Post.RequestBody.Value.Content["application/json"].Schema.Value)
	}
	for _, path := range []string{"/v1/bulk-lookup", "/v1/unlimited/bulk-lookup"} {
		if doc.Paths.Find(path).Post.RequestBody.Value.Content["application/json"].Schema.Value != schemas["LookupBulkRequest"].Value {
			t.Errorf("%s body is not LookupBulkRequest", path)
		}
	}

	closed := func(name string, s *openapi3.Schema, fields ...string) {
		t.Helper()
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("%s must forbid additional properties", name)
		}
		if len(s.Properties) != len(fields) || len(s.Required) != len(fields) {
			t.Errorf("%s: %d properties, %d required, want exactly %v", name, len(s.Properties), len(s.Required), fields)
		}
		for _, f := range fields {
			if s.Properties[f] == nil {
				t.Errorf("%s lacks %s", name, f)
			}
		}
	}
	enrichment := []string{"email", "email_provider", "mx_record", "is_catch_all", "is_role", "is_free", "is_disposable", "confidence"}
	rowFields := append([]string{"status", "substatus", "first_name", "last_name", "domain"}, enrichment...)
	substatuses := []string{finder.SubVerified, finder.SubCatchAllPattern, finder.SubCatchAllGuess, finder.SubNoMatch,
		finder.SubNoSuchDomain, finder.SubNullMX, finder.SubNoMailServer, finder.SubInvalidDomain, finder.SubInvalidName,
		finder.SubUnknown}
	enumIs := func(name string, got []any, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s enum %v, want %v", name, got, want)
			return
		}
		for i, w := range want {
			if got[i] != w {
				t.Errorf("%s enum %v, want %v", name, got, want)
				return
			}
		}
	}
	for _, c := range []struct {
		name     string
		fields   []string
		statuses []string
		subs     []string
	}{
		{"LookupResultRow", rowFields, []string{"found", "not_found", family.OutcomeSuppressed, "pending"}, // ambiguous: two rows of one job, one address, or an address against the domain's pattern; suppressed: a person erased on their request (docs/privacy.md)
			append(append(append([]string{}, substatuses[:4]...), finder.SubAmbiguous), append(append([]string{}, substatuses[4:]...), "processing_error", lookup.SubQueued, lookup.SubRetrying, family.OutcomeSuppressed)...)},
		{"LookupResponse", append(append([]string{}, rowFields...), "credits_consumed"), []string{"found", "not_found", family.OutcomeSuppressed},
			append(append(append(append([]string{}, substatuses[:4]...), finder.SubAmbiguous), substatuses[4:len(substatuses)-1]...), family.OutcomeSuppressed)}, // unknown is a 502
	} {
		row := schemas[c.name].Value
		closed(c.name, row, c.fields...)
		enumIs(c.name+".status", row.Properties["status"].Value.Enum, c.statuses...)
		enumIs(c.name+".substatus", row.Properties["substatus"].Value.Enum, c.subs...)
		for _, f := range c.fields {
			nullable := row.Properties[f].Value.Type.Includes("null")
			isEnrichment := false
			for _, e := range enrichment {
				isEnrichment = isEnrichment || e == f
			}
			if nullable != isEnrichment {
				t.Errorf("%s.%s: nullable %v, want %v", c.name, f, nullable, isEnrichment)
			}
		}
	}
	closed("LookupSubmission", schemas["LookupSubmission"].Value, "job_id", "status", "total_rows", "credits_consumed")
	closed("LookupJobStatus", schemas["LookupJobStatus"].Value, "job_id", "status", "total_rows", "total_processed",
		"summary", "credits_consumed", "created_at", "completed_at")
	closed("LookupJobStatus.summary", schemas["LookupJobStatus"].Value.Properties["summary"].Value,
		"total_found", "total_not_found", "total_suppressed", "total_retrying", "total_pending")
	enumIs("LookupJobStatus.status", schemas["LookupJobStatus"].Value.Properties["status"].Value.Enum, "running", "completed")
	closed("LookupResultsPage", schemas["LookupResultsPage"].Value, "job_id", "total_rows", "total_processed", "limit", "offset", "results")
	if schemas["LookupResultsPage"].Value.Properties["results"].Value.Items.Value != schemas["LookupResultRow"].Value {
		t.Errorf("LookupResultsPage.results items are not LookupResultRow")
	}
}
