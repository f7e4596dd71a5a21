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
	_, unl := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, time.Now().Add(time.Hour))
	_, lapsed := api.unlimitedAccount(accounts.PlanStarter, accounts.StateLapsed, time.Now().Add(time.Hour))

	type ex struct{ method, path, body, key string }
	for _, e := range []ex{
		{"GET", "/v1/credits", "", payg},
		{"GET", "/v1/credits", "", ""},
		{"GET", "/v1/credits", "", unl},
		{"GET", "/v1/unlimited/usage", "", unl},
		{"GET", "/v1/unlimited/usage", "", payg},
		{"GET", "/v1/unlimited/usage", "", lapsed},
		{"POST", "/v1/content-spam-check", `{"content":"hi"}`, payg},
		{"POST", "/v1/content-spam-check", `{"content":`, unl},
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
