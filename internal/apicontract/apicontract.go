// Package apicontract checks HTTP exchanges against the API's published
// OpenAPI document (apiserver/openapi.yaml): every request a test sends and
// every answer the server gives, with kin-openapi's OpenAPI 3.1 validator
// (JSON Schema 2020-12). Tests put Serve around the handler they serve, so
// no test has to remember to check: whatever reaches the server is
// checked, and a mismatch fails the test that caused it.
//
// What is checked, for an exchange on a documented operation:
//   - the answer: its status is documented for the operation, its body
//     matches the status's schema, and every header the document marks
//     required is there and matches its schema;
//   - the request, against the answer: a 2xx answers only a request the
//     document accepts (parameters, API key, and the body when the handler
//     read all of it), and a 422 that names a header, query or path
//     parameter answers only a request the document refuses (issue 26:
//     Idempotency-Key's maxLength said 257 while the server refused 256);
//   - the rules the document states once for all answers: Cache-Control
//     no-store and an X-Request-ID.
//
// For a request on no documented operation: an unknown /v1 path must be a
// 404 and a documented path with another method a 405 with Allow, both with
// the Error body. Paths outside the document and /v1 (the dashboard) are
// not the API's and are left alone.
//
// Every (operation, status) pair seen is counted process-wide (Seen), so a
// package's TestMain can list the documented pairs its tests never produced
// (Unproduced).
package apicontract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/bulkd/bulkd/apiserver"
)

// MaxBody is the most of a response body kept for checking, and
// MaxRequestBody of a request body; a larger body's other parts are still
// checked (status, headers, parameters). The CSV results of a 100,000-row
// job are about 20 MB. A request body is decoded and walked whole by the
// schema validator, which costs about a second a MiB on a loaded machine:
// the admission tests' large bodies, timed, would miss their deadlines.
const (
	MaxBody        = 32 << 20
	MaxRequestBody = 256 << 10
)

// docServer is the server URL the router matches: requests are checked as
// if sent to it, whatever loopback port the test server has.
const docServer = "http://bulkd.contract"

// Pair is one documented answer of one operation: method, path template as
// the document writes it, status.
type Pair struct {
	Method string
	Path   string
	Status string
}

func (p Pair) String() string { return p.Method + " " + p.Path + " -> " + p.Status }

// Checker validates exchanges against one loaded document.
type Checker struct {
	doc    *openapi3.T
	router routers.Router
	errSch *openapi3.Schema

	mu   sync.Mutex
	seen map[Pair]int
}

var (
	defaultOnce sync.Once
	defaultC    *Checker
	defaultErr  error
)

// Default is the checker of the document apiserver serves, loaded once per
// process, so that every test server of a package counts into one Seen.
func Default() (*Checker, error) {
	defaultOnce.Do(func() { defaultC, defaultErr = New(apiserver.OpenAPI) })
	return defaultC, defaultErr
}

// New loads and validates a document (JSON or YAML).
func New(doc []byte) (*Checker, error) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load openapi document: %w", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi document is invalid: %w", err)
	}
	d.Servers = openapi3.Servers{{URL: docServer}}
	router, err := legacy.NewRouter(d)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	es := d.Components.Schemas["Error"]
	if es == nil || es.Value == nil {
		return nil, errors.New("openapi document has no components.schemas.Error")
	}
	return &Checker{doc: d, router: router, errSch: es.Value, seen: map[Pair]int{}}, nil
}

// Doc is the loaded document (its servers replaced).
func (c *Checker) Doc() *openapi3.T { return c.doc }

// Documented lists every (operation, status) pair of the document's paths,
// sorted. Status ranges ("2XX") and "default" are not pairs a test can
// aim at and are left out.
func (c *Checker) Documented() []Pair {
	var out []Pair
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if _, err := strconv.Atoi(status); err != nil {
					continue
				}
				out = append(out, Pair{Method: method, Path: path, Status: status})
			}
		}
	}
	sortPairs(out)
	return out
}

// Seen is how often each pair was answered so far in this process.
func (c *Checker) Seen() map[Pair]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[Pair]int, len(c.seen))
	for k, v := range c.seen {
		m[k] = v
	}
	return m
}

// Unproduced lists the documented pairs no exchange produced so far.
func (c *Checker) Unproduced() []Pair {
	seen := c.Seen()
	var out []Pair
	for _, p := range c.Documented() {
		if seen[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

func sortPairs(ps []Pair) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Path != ps[j].Path {
			return ps[i].Path < ps[j].Path
		}
		if ps[i].Method != ps[j].Method {
			return ps[i].Method < ps[j].Method
		}
		return ps[i].Status < ps[j].Status
	})
}

// Exchange is one request and its answer as the server saw them.
type Exchange struct {
	Method string
	// RequestURI is the path and query as sent.
	RequestURI string
	Header     http.Header
	// Body is the request body the handler read; BodyComplete says it read
	// all of it (and it fit in MaxBody).
	Body         []byte
	BodyComplete bool

	Status         int
	ResponseHeader http.Header
	ResponseBody   []byte
	// ResponseComplete says ResponseBody is the whole answer.
	ResponseComplete bool
}

func (e *Exchange) String() string {
	return fmt.Sprintf("%s %s -> %d", e.Method, e.RequestURI, e.Status)
}

// Check validates one exchange and returns every mismatch found (nil: it
// matches the document).
func (c *Checker) Check(ex *Exchange) []string {
	req, err := http.NewRequest(ex.Method, docServer+ex.RequestURI, nil)
	if err != nil {
		return []string{fmt.Sprintf("%s: unparsable request: %v", ex, err)}
	}
	req.Header = ex.Header.Clone()
	// As a client reads them: the server sets some names by map key to
	// keep their spelling (X-RateLimit-*), which Header.Get would miss.
	canon := make(http.Header, len(ex.ResponseHeader))
	for k, vs := range ex.ResponseHeader {
		for _, v := range vs {
			canon.Add(k, v)
		}
	}
	ex.ResponseHeader = canon
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return c.checkUnrouted(ex, req, err)
	}
	c.mu.Lock()
	c.seen[Pair{Method: route.Method, Path: route.Path, Status: strconv.Itoa(ex.Status)}]++
	c.mu.Unlock()

	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, ex.String()+": "+fmt.Sprintf(format, args...))
	}

	// The answer.
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 ex.Status,
		Header:                 ex.ResponseHeader,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
			ExcludeResponseBody: !ex.ResponseComplete},
	}
	rin.SetBodyBytes(ex.ResponseBody)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		fail("the answer does not match the document: %v\nanswer body: %.1000s", err, ex.ResponseBody)
	}
	if got := ex.ResponseHeader.Get("Cache-Control"); got != "no-store" {
		fail("Cache-Control %q, the document says every answer is no-store", got)
	}
	if ex.ResponseHeader.Get("X-Request-ID") == "" {
		fail("no X-Request-ID, the document says every answer carries one")
	}

	// The request, judged by what the server made of it.
	reqErr := c.validateRequest(ex, req, route, params)
	switch {
	case ex.Status >= 200 && ex.Status < 300 && reqErr != nil:
		fail("the server accepted a request the document refuses: %v\nrequest body: %.500s", reqErr, ex.Body)
	case ex.Status == http.StatusUnprocessableEntity && reqErr == nil:
		if locs := refusedParameters(ex, req); len(locs) > 0 {
			fail("the server refused %v, which the document accepts\nanswer body: %.1000s", locs, ex.ResponseBody)
		}
	}
	return problems
}

// validateRequest checks the request's parameters, API key and (when the
// handler read all of it) body against the route's operation.
func (c *Checker) validateRequest(ex *Exchange, req *http.Request, route *routers.Route, params map[string]string) error {
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(ex.Body))
	r.ContentLength = int64(len(ex.Body))
	// bulkd reads every body as JSON whatever its Content-Type (docs/api.md):
	// a body sent without one is checked as the JSON it is read as.
	if r.Header.Get("Content-Type") == "" && len(ex.Body) > 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			SkipSettingDefaults: true,
			ExcludeRequestBody:  !ex.BodyComplete,
			AuthenticationFunc:  authenticate,
		}}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// authenticate is the document's apiKey scheme as the server applies it:
// exactly one non-empty header of the scheme's name. Whether the key is
// valid is the server's to say (401).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s == nil || s.Type != "apiKey" || s.In != "header" {
		return fmt.Errorf("security scheme %q is not an API key header", in.SecuritySchemeName)
	}
	vals := in.RequestValidationInput.Request.Header.Values(s.Name)
	if len(vals) != 1 || strings.TrimSpace(vals[0]) == "" {
		return fmt.Errorf("one %s header is required, got %d", s.Name, len(vals))
	}
	return nil
}

// refusedParameters returns the errors[] locations of a plain validation
// 422 that name a header, query or path parameter the request carries, one
// value of it, not empty: what the document's parameter schemas must refuse
// too. Left out are the refusals no parameter schema can state: a 422 with
// a code (idempotency_key_reused: the key was used with another request), a
// parameter missing (at least one of network_url and domain), sent twice or
// empty (validators take an empty header for an absent one), and limit with
// format=csv (components.parameters.ResultsFormat).
func refusedParameters(ex *Exchange, req *http.Request) []string {
	var out []string
	q := req.URL.Query()
	for _, loc := range parameterLocs(ex.ResponseBody) {
		where, name, _ := strings.Cut(loc, ".")
		var vals []string
		switch where {
		case "header":
			vals = req.Header.Values(name)
		case "query":
			vals = q[name]
		case "path":
			vals = []string{"(in the path)"}
		}
		if len(vals) != 1 || vals[0] == "" {
			continue
		}
		if loc == "query.limit" && q.Get("format") == "csv" {
			continue
		}
		out = append(out, loc)
	}
	return out
}

// parameterLocs returns the errors[] locations of a plain validation 422
// (no code) that name a header, query or path parameter.
func parameterLocs(body []byte) []string {
	var e struct {
		Code   string `json:"code"`
		Errors []struct {
			Loc string `json:"loc"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || e.Code != "" {
		return nil
	}
	var out []string
	for _, it := range e.Errors {
		for _, p := range []string{"header.", "query.", "path."} {
			if strings.HasPrefix(it.Loc, p) {
				out = append(out, it.Loc)
			}
		}
	}
	return out
}

// checkUnrouted checks an exchange on no documented operation: the
// document's general rules for unknown paths (404) and methods (405).
func (c *Checker) checkUnrouted(ex *Exchange, req *http.Request, routeErr error) []string {
	var rerr *routers.RouteError
	if !errors.As(routeErr, &rerr) {
		return []string{fmt.Sprintf("%s: routing: %v", ex, routeErr)}
	}
	path := req.URL.Path
	inV1 := path == "/v1" || strings.HasPrefix(path, "/v1/")
	var want int
	switch {
	case c.pathDocumented(req):
		want = http.StatusMethodNotAllowed
	case inV1:
		want = http.StatusNotFound
	default:
		return nil // not the API's (the dashboard, /metrics)
	}
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, ex.String()+": "+fmt.Sprintf(format, args...))
	}
	// A valid key over its limit gets its 429 first (apiserver's unmatched);
	// a method HTTP does not define is 405 on any path (info.description).
	if ex.Status != want && ex.Status != http.StatusTooManyRequests &&
		!(ex.Status == http.StatusMethodNotAllowed && !standardMethod(req.Method)) {
		fail("a request on no documented operation must be %d (docs: info.description), got %d", want, ex.Status)
		return problems
	}
	// RFC 9110 15.5.6: a 405 has an Allow header, empty when the path
	// has no method at all (an unknown path with a method HTTP lacks).
	if _, ok := ex.ResponseHeader["Allow"]; ex.Status == http.StatusMethodNotAllowed &&
		(!ok || want == http.StatusMethodNotAllowed && ex.ResponseHeader.Get("Allow") == "") {
		fail("405 without the Allow header listing the path's methods")
	}
	if ex.ResponseComplete {
		var v any
		if err := json.Unmarshal(ex.ResponseBody, &v); err != nil {
			fail("answer is not JSON: %v: %.200s", err, ex.ResponseBody)
		} else if err := c.errSch.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			fail("answer is not an Error body: %v", err)
		}
	}
	return problems
}

// standardMethod reports whether m is one of the methods of RFC 9110 or
// PATCH.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return true
	}
	return false
}

// pathDocumented reports whether req's path is a documented path under
// some other method than req's.
func (c *Checker) pathDocumented(req *http.Request) bool {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == req.Method {
			continue
		}
		r := req.Clone(context.Background())
		r.Method = m
		if _, _, err := c.router.FindRoute(r); err == nil {
			return true
		}
	}
	return false
}

// requestURI is r's path and query as sent.
func requestURI(r *http.Request) string {
	if r.RequestURI != "" {
		return r.RequestURI
	}
	u := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	return u.RequestURI()
}
