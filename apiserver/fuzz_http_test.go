package apiserver_test

// Fuzzers of every HTTP body decoder, through the real handler: each
// builds a whole standalone bulkd (internal/bulkdtest: the router and
// handlers `bulkd serve` builds, a private redis-server, the real job
// engine and billing, no workers) and sends the fuzzed body with a valid
// key to the endpoint. The assertions are the API's promises for any
// input: no 5xx (503 server_busy from admission control aside, and 503
// engine_unavailable from the spam check, which runs with no spamd here),
// every 4xx a SPEC 2.10 error body, every answer JSON with the rate-limit
// headers, never a panic (the recoverer would turn one into a 500).
//
// The requests go to the handler in-process (ServeHTTP with a recorder),
// not over loopback: the same router, middleware and handlers, and a
// hundred times the executions a second. The seed corpus lives in
// testdata/fuzz/<FuzzName>/; `make fuzz` (hack/fuzz-all.sh) runs them all.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// httpFuzzer is one bulkd and a key of each kind.
type httpFuzzer struct {
	env       *bulkdtest.Env
	payg, unl string
}

// fuzzDomain is the mail world's one domain with a mailbox, so that valid
// single lookups reach an SMTP server; every other domain is NXDOMAIN.
const fuzzDomain = "acme.example"

func newHTTPFuzzer(f *testing.F) *httpFuzzer {
	f.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	w, err := mailworld.Start(ctx, mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx." + fuzzDomain}},
		Domains: []mailworld.Domain{{Name: fuzzDomain, MX: []string{"mx." + fuzzDomain}, Users: []string{"ada.lovelace"}}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = w.Close() })
	env := bulkdtest.Start(f, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.RateLimit = 1_000_000_000
		c.UnlimitedLookupRPS = 1_000_000_000
		c.DNSServer = w.DNSAddr()
		c.SMTPPort = w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs
		// No politeness waits against the one local mail host: a single
		// lookup must finish well inside its time limit.
		c.SMTPSessionsPerHost = 100
		c.SMTPSessionRate = 1e9
	}))
	acct, payg := env.Account(credits.Whole(1_000_000_000_000))
	unl := env.Key(acct, accounts.Unlimited)
	// No period end: the monthly single-lookup window is the calendar
	// month, which check moves past when a long run uses it up.
	if err := env.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanProfessional, accounts.StateActive, time.Time{}); err != nil {
		f.Fatal(err)
	}
	return &httpFuzzer{env: env, payg: payg, unl: unl}
}

// key is the key a fuzz input uses.
func (h *httpFuzzer) key(unlimited bool) string {
	if unlimited {
		return h.unl
	}
	return h.payg
}

// postAs sends body with the key of the kind asked for: to path with the
// pay-as-you-go key, or to its /v1/unlimited/ twin with the unlimited key.
func (h *httpFuzzer) postAs(t *testing.T, unlimited bool, path string, body []byte) {
	if unlimited {
		h.post(t, "/v1/unlimited/"+strings.TrimPrefix(path, "/v1/"), h.unl, body)
		return
	}
	h.post(t, path, h.payg, body)
}

// post sends body to path with key through the real handler and checks
// the answer against the API's promises.
func (h *httpFuzzer) post(t *testing.T, path, key string, body []byte) {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.env.Parts.API.ServeHTTP(rec, req)
	res := rec.Result()
	got := rec.Body.Bytes()
	fail := func(why string) {
		t.Helper()
		t.Fatalf("POST %s: %s\nstatus %d headers %v\nbody %.2000s\ninput %.2000q", path, why, res.StatusCode, res.Header, got, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		fail("Content-Type " + ct)
	}
	if !hasRateHeaders(res.Header) {
		fail("no rate-limit headers on an authenticated answer")
	}
	if !json.Valid(got) {
		fail("answer is not JSON")
	}
	switch s := res.StatusCode; {
	case s >= 200 && s < 300:
		return
	case s >= 400 && s < 500:
		if why := specErrorShape(s, got); why != "" {
			fail(why)
		}
		// Quotas are spent by long runs: start a new day (and month), so
		// the fuzzer keeps reaching what comes after the charge.
		if s == http.StatusTooManyRequests && !bytes.Contains(got, []byte(`"rate_limited"`)) {
			h.env.Clock.Set(h.env.Clock.Now().Add(32 * 24 * time.Hour))
		}
	case s == http.StatusServiceUnavailable:
		code := errorCode(got)
		if code != "server_busy" && !(code == "engine_unavailable" && path == "/v1/content-spam-check") {
			fail("503 with code " + code)
		}
		if why := specErrorShape(s, got); why != "" {
			fail(why)
		}
	default:
		fail("unexpected status")
	}
}

func errorCode(b []byte) string {
	var m struct{ Code string }
	_ = json.Unmarshal(b, &m)
	return m.Code
}

// specErrorShape checks an error body against SPEC 2.10: an object with a
// non-empty detail, an optional string code, and errors (each item a
// non-empty loc, msg and type) exactly on 422, where a single item's msg
// is also the detail. It returns what is wrong, or "".
func specErrorShape(status int, b []byte) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "error body is not a JSON object"
	}
	var detail string
	if err := json.Unmarshal(m["detail"], &detail); err != nil || detail == "" || !utf8.ValidString(detail) {
		return "no detail string"
	}
	if c, ok := m["code"]; ok {
		var code string
		if err := json.Unmarshal(c, &code); err != nil || code == "" {
			return "code is not a string"
		}
	}
	raw, has := m["errors"]
	if has != (status == http.StatusUnprocessableEntity) {
		return "errors[] present only on 422"
	}
	if has {
		var items []map[string]string
		if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
			return "errors[] is not a list of items"
		}
		for _, it := range items {
			if it["loc"] == "" || it["msg"] == "" || it["type"] == "" || len(it) != 3 {
				return "an errors[] item lacks loc, msg or type, or has more"
			}
		}
		if len(items) == 1 && items[0]["msg"] != detail {
			return "a single problem's msg is not the detail"
		}
	}
	for k := range m {
		if k != "detail" && k != "code" && k != "errors" {
			return "extra field " + k
		}
	}
	return ""
}

// addBodies seeds a (body []byte) fuzzer.
func addBodies(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
}

// addSeeds seeds a (unlimited bool, body []byte) fuzzer with every body
// for each kind of key.
func addSeeds(f *testing.F, bodies ...string) {
	for _, u := range []bool{false, true} {
		for _, b := range bodies {
			f.Add(u, []byte(b))
		}
	}
}

// Bodies every decoder must refuse cleanly.
var commonBadBodies = []string{
	``, ` `, `null`, `[]`, `{}`, `"x"`, `1`, `{`, `}`, `{"input":`, `{"input":null}`, `{"input":[]}`, `{"input":{}}`,
	`{"input":[null]}`, `{"input":[1,2]}`, `{"input":[[]]}`, `{} {}`, "\xff\xfe", `{"input":["\ud800"]}`,
	`{"a":` + strings.Repeat(`[`, 10000), strings.Repeat(`{"input":`, 500),
}

// FuzzCompanyBulkHTTP: POST /v1/company-enrichment/bulk (pay-as-you-go).
func FuzzCompanyBulkHTTP(f *testing.F) {
	h := newHTTPFuzzer(f)
	addBodies(f, append([]string{
		`{"input":[{"domain":"acme.example"}]}`,
		`{"input":[{"network_url":"https://www.linkedin.com/company/acme"},{"domain":"acme.example"},{"domain":"ACME.example."}]}`,
		`{"input":[{"domain":"acme.example","network_url":"https://linkedin.com/company/acme"}]}`,
		`{"input":[{"domain":1},{"network_url":2}]}`,
		`{"input":[{"domain":"` + strings.Repeat("a", 2049) + `"}]}`,
		`{"input":[{"name":"Acme"},{}]}`,
		`{"input":"acme.example"}`,
		`{"input":[{"domain":"acme.example"}],"input":[]}`,
		`{"input":[{"domain":"xn--80ak6aa92e.com"},{"network_url":"https://www.linkedin.com/company/%E2%82%AC/about?x=1#y"}]}`,
	}, commonBadBodies...)...)
	f.Fuzz(func(t *testing.T, body []byte) {
		h.post(t, "/v1/company-enrichment/bulk", h.payg, body)
	})
}

// FuzzVerificationBulkHTTP: POST /v1/bulk (pay-as-you-go).
func FuzzVerificationBulkHTTP(f *testing.F) {
	h := newHTTPFuzzer(f)
	addBodies(f, append([]string{
		`{"emails":["ada@acme.example"]}`,
		`{"emails":["ada@acme.example","ADA@acme.example","b@c.example"]}`,
		`{"emails":[]}`,
		`{"emails":["a"]}`,
		`{"emails":["` + strings.Repeat("a", 320) + `@x.example"]}`,
		`{"emails":[1,null,{}]}`,
		`{"emails":"ada@acme.example"}`,
		`{"input":["ada@acme.example"]}`,
		`{"emails":["ünïcödé@bücher.example","\u0000@x.example"]}`,
	}, commonBadBodies...)...)
	f.Fuzz(func(t *testing.T, body []byte) {
		h.post(t, "/v1/bulk", h.payg, body)
	})
}

// FuzzLookupBulkHTTP: POST /v1/bulk-lookup (pay-as-you-go) and
// /v1/unlimited/bulk-lookup (unlimited key).
func FuzzLookupBulkHTTP(f *testing.F) {
	h := newHTTPFuzzer(f)
	addSeeds(f, append([]string{
		`{"input":[{"first_name":"Ada","last_name":"Lovelace","domain":"acme.example"}]}`,
		`{"input":[{"first_name":"Ada","last_name":"Lovelace","domain":"acme.example"},{"first_name":"ADA","last_name":"lovelace","domain":"Acme.Example"}]}`,
		`{"input":[{"first_name":"","last_name":"L","domain":"acme.example"}]}`,
		`{"input":[{"first_name":"Ada","last_name":"Lovelace"}]}`,
		`{"input":[{"first_name":1,"last_name":true,"domain":null}]}`,
		`{"input":[{"first_name":"` + strings.Repeat("é", 256) + `","last_name":"L","domain":"acme.example"}]}`,
		`{"input":[{"first_name":"Ada","last_name":"Lovelace","domain":"not a domain"}]}`,
	}, commonBadBodies...)...)
	f.Fuzz(func(t *testing.T, unlimited bool, body []byte) {
		h.postAs(t, unlimited, "/v1/bulk-lookup", body)
	})
}

// FuzzSingleLookupHTTP: POST /v1/email-lookup (pay-as-you-go) and
// /v1/unlimited/email-lookup (unlimited key), against the mail world.
func FuzzSingleLookupHTTP(f *testing.F) {
	h := newHTTPFuzzer(f)
	addSeeds(f, append([]string{
		`{"first_name":"Ada","last_name":"Lovelace","domain":"acme.example"}`,
		`{"first_name":"Grace","last_name":"Hopper","domain":"acme.example"}`,
		`{"first_name":"Ada","last_name":"Lovelace","domain":"nowhere.example"}`,
		`{"first_name":"Ada","last_name":"Lovelace","domain":"[127.0.0.1]"}`,
		`{"first_name":"Ada","last_name":"Lovelace","domain":"localhost"}`,
		`{"first_name":"","last_name":"","domain":""}`,
		`{"first_name":"Ada"}`,
		`{"first_name":["Ada"],"last_name":{},"domain":0}`,
		`{"first_name":"Ada","last_name":"Lovelace","domain":"acme.example","extra":1}`,
	}, commonBadBodies...)...)
	f.Fuzz(func(t *testing.T, unlimited bool, body []byte) {
		h.postAs(t, unlimited, "/v1/email-lookup", body)
	})
}

// FuzzSpamCheckHTTP: POST /v1/content-spam-check, with either kind of key.
func FuzzSpamCheckHTTP(f *testing.F) {
	h := newHTTPFuzzer(f)
	addSeeds(f, append([]string{
		`{"content":"Hello, world"}`,
		`{"subject":"Hi","content":"Buy now!!!"}`,
		`{"subject":null,"content":""}`,
		`{"subject":"` + strings.Repeat("s", 999) + `","content":"x"}`,
		`{"content":1}`,
		`{"subject":"x"}`,
	}, commonBadBodies...)...)
	f.Fuzz(func(t *testing.T, unlimited bool, body []byte) {
		h.post(t, "/v1/content-spam-check", h.key(unlimited), body)
	})
}
