package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// openapiChecker validates live responses against the served document.
type openapiChecker struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
}

func newOpenAPIChecker(t *testing.T, api *testAPI) *openapiChecker {
	t.Helper()
	r := api.do(http.MethodGet, "/openapi.json", "")
	if r.Status != 200 {
		t.Fatalf("GET /openapi.json: %d", r.Status)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.Body)
	if err != nil {
		t.Fatalf("load openapi: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "1.0.0" {
		t.Fatalf("openapi %s version %s", doc.OpenAPI, doc.Info.Version)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi document invalid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: api.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &openapiChecker{t: t, doc: doc, router: router}
}

// check validates one exchange: the route must be documented, and the
// status, headers and body must match the document.
func (c *openapiChecker) check(method, url string, body string, r response) {
	c.t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Fatalf("%s %s is not in the OpenAPI document: %v", method, url, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  r.Status,
		Header:  r.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Fatalf("%s %s -> %d does not match the OpenAPI document: %v\nbody: %s", method, url, r.Status, err, r.Body)
	}
}

func TestLiveResponsesMatchOpenAPI(t *testing.T) {
	api := newTestAPI(t, withRateLimit(5))
	oc := newOpenAPIChecker(t, api)
	_, payg := api.account(credits.Amount(12400), accounts.PayAsYouGo)
	_, unl := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))
	_, lapsed := api.unlimitedAccount(accounts.PlanStarter, accounts.StateLapsed, api.Clock.Now().Add(time.Hour))

	type ex struct{ method, path, body, key string }
	for _, e := range []ex{
		{"GET", "/v1/credits", "", payg},
		{"GET", "/v1/credits", "", ""},
		{"GET", "/v1/credits", "", unl},
		{"GET", "/v1/unlimited/usage", "", unl},
		{"GET", "/v1/unlimited/usage", "", payg},
		{"GET", "/v1/unlimited/usage", "", lapsed},
		{"POST", "/v1/content-spam-check", `{"text":"hi"}`, payg}, // no spamd here: 503 engine_unavailable
		{"POST", "/v1/content-spam-check", `{"text":`, unl},
		{"POST", "/v1/content-spam-check", `{}`, unl},
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"GET", "/v1/credits", "", payg}, {"GET", "/v1/credits", "", payg}, {"GET", "/v1/credits", "", payg}, // into 429
	} {
		var r response
		if e.key != "" {
			r = api.do(e.method, e.path, e.body, "X-API-Key", e.key)
		} else {
			r = api.do(e.method, e.path, e.body)
		}
		oc.check(e.method, api.URL+e.path, e.body, r)
	}
	r := api.get("/v1/credits", payg)
	if r.Status != 429 {
		t.Fatalf("expected 429 after the burst, got %d", r.Status)
	}
	oc.check("GET", api.URL+"/v1/credits", "", r)
}

// TestCompanyAnswersMatchOpenAPI validates the company endpoints' answers
// that come before the job engine (authentication, key family, request
// validation); test/e2e validates every other answer against the same
// document.
func TestCompanyAnswersMatchOpenAPI(t *testing.T) {
	api := newTestAPI(t)
	oc := newOpenAPIChecker(t, api)
	_, payg := api.account(credits.Whole(5), accounts.PayAsYouGo)
	_, unl := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))
	const job = "/v1/company-enrichment/bulk/6f1d7a38-0c7e-4d8a-9b8e-2f3a4b5c6d7e"
	for _, e := range []struct {
		method, path, body, key string
		status                  int
	}{
		{"POST", "/v1/company-enrichment/bulk", `{"input":[]}`, payg, 422},
		{"POST", "/v1/company-enrichment/bulk", `{"input":[{"domain":1},{"network_url":2}]}`, payg, 422},
		{"POST", "/v1/company-enrichment/bulk", `{"input":"acme.example"}`, payg, 422},
		{"POST", "/v1/company-enrichment/bulk", `{"input":[`, payg, 400},
		{"POST", "/v1/company-enrichment/bulk", `{"input":[]}`, "", 401},
		{"POST", "/v1/company-enrichment/bulk", `{"input":[]}`, unl, 403},
		{"GET", "/v1/company-enrichment/bulk/not-a-uuid", "", payg, 422},
		{"GET", job, "", "", 401},
		{"GET", job, "", unl, 403},
		{"GET", "/v1/company-enrichment/bulk/not-a-uuid/results", "", payg, 422},
		{"GET", job + "/results?limit=0&offset=x", "", payg, 422},
		{"GET", job + "/results", "", unl, 403},
		{"GET", "/v1/company-enrichment", "", payg, 422},
		{"GET", "/v1/company-enrichment?domain=acme.example", "", "", 401},
		{"GET", "/v1/company-enrichment?domain=acme.example", "", unl, 403},
	} {
		var r response
		if e.key != "" {
			r = api.do(e.method, e.path, e.body, "X-API-Key", e.key)
		} else {
			r = api.do(e.method, e.path, e.body)
		}
		if r.Status != e.status {
			t.Fatalf("%s %s: %d, want %d: %s", e.method, e.path, r.Status, e.status, r.Body)
		}
		oc.check(e.method, api.URL+e.path, e.body, r)
	}
}

// TestOpenAPICompanyContract pins what the document promises about the
// company endpoints (SPEC 2.1 to 2.6, 4.1): the operations and their
// answers, the parameters with their bounds and defaults, the body limits,
// and result rows whose every field is required and nothing else allowed.
func TestOpenAPICompanyContract(t *testing.T) {
	api := newTestAPI(t)
	doc := newOpenAPIChecker(t, api).doc
	ops := map[string]struct {
		method    string
		responses []string
	}{
		"/v1/company-enrichment/bulk":                  {"POST", []string{"200", "400", "401", "403", "408", "409", "422", "429", "500", "503"}},
		"/v1/company-enrichment/bulk/{job_id}":         {"GET", []string{"200", "401", "403", "404", "422", "429", "500", "503"}},
		"/v1/company-enrichment/bulk/{job_id}/results": {"GET", []string{"200", "401", "403", "404", "422", "429", "500", "503"}},
		"/v1/company-enrichment":                       {"GET", []string{"200", "401", "403", "409", "422", "429", "500", "503"}},
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
	}
	params := func(path string) map[string]*openapi3.Parameter {
		m := map[string]*openapi3.Parameter{}
		for _, p := range doc.Paths.Find(path).Get.Parameters {
			m[p.Value.Name] = p.Value
		}
		return m
	}
	res := params("/v1/company-enrichment/bulk/{job_id}/results")
	jobID, limit, offset := res["job_id"], res["limit"], res["offset"]
	if jobID == nil || jobID.In != "path" || !jobID.Required || jobID.Schema.Value.Format != "uuid" {
		t.Errorf("job_id: %+v", jobID)
	}
	if limit == nil || limit.In != "query" || limit.Required || *limit.Schema.Value.Min != 1 || *limit.Schema.Value.Max != 500 || limit.Schema.Value.Default != float64(50) {
		t.Errorf("limit must be an optional query integer 1..500, default 50")
	}
	if offset == nil || offset.In != "query" || offset.Required || *offset.Schema.Value.Min != 0 || offset.Schema.Value.Max != nil || offset.Schema.Value.Default != float64(0) {
		t.Errorf("offset must be an optional query integer >= 0, default 0")
	}
	if p := params("/v1/company-enrichment/bulk/{job_id}")["job_id"]; p == nil || p.Schema.Value.Format != "uuid" {
		t.Errorf("status job_id: %+v", p)
	}

	schemas := doc.Components.Schemas
	input := schemas["CompanyBulkRequest"].Value.Properties["input"].Value
	if input.MinItems != 1 || input.MaxItems == nil || *input.MaxItems != 100_000 {
		t.Errorf("input must hold 1 to 100,000 rows")
	}
	for _, f := range []string{"network_url", "domain"} {
		if v := input.Items.Value.Properties[f].Value; v.MaxLength == nil || *v.MaxLength != 2048 {
			t.Errorf("row.%s must be at most 2,048 characters", f)
		}
	}

	rowFields := []string{"result", "input", "input_url", "is_redirect", "redirected_to", "credits_consumed", "reason",
		"network_url", "network_id", "name", "description", "website", "domain", "email_domain", "industry",
		"company_size", "employee_count", "company_type", "headquarters", "founded_year", "specialties",
		"follower_count", "similar_companies"}
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
	row := schemas["CompanyResultRow"].Value
	closed("CompanyResultRow", row, rowFields...)
	if got := row.Properties["result"].Value.Enum; len(got) != 5 {
		t.Errorf("result enum %v", got)
	}
	closed("company_size", row.Properties["company_size"].Value, "label", "min", "max")
	closed("headquarters", row.Properties["headquarters"].Value, "text", "city", "region", "country")
	closed("similar_companies item", row.Properties["similar_companies"].Value.Items.Value, "name", "network_url", "industry", "location")
	for _, f := range rowFields {
		types := row.Properties[f].Value.Type
		nullable := types.Includes("null")
		switch f {
		case "result", "is_redirect", "credits_consumed", "specialties", "similar_companies":
			if nullable {
				t.Errorf("row.%s must not be nullable", f)
			}
		default:
			if !nullable {
				t.Errorf("row.%s must be nullable ([type, \"null\"])", f)
			}
		}
	}
	closed("CompanyBulkSubmission", schemas["CompanyBulkSubmission"].Value, "job_id", "status", "total_rows", "total_invalid", "credits_consumed")
	closed("CompanyJobStatus", schemas["CompanyJobStatus"].Value, "job_id", "status", "total_rows", "total_processed", "total_invalid",
		"total_distinct", "credits_consumed", "summary", "created_at", "completed_at")
	closed("CompanyJobStatus.summary", schemas["CompanyJobStatus"].Value.Properties["summary"].Value,
		"total_found", "total_not_found", "total_error", "total_invalid_url", "total_pending")
	closed("CompanyResultsPage", schemas["CompanyResultsPage"].Value, "job_id", "total_rows", "total_processed", "limit", "offset", "results")
}
