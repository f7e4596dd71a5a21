package apicontract

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The checker's rules, each shown catching the kind of mismatch issue 26's
// independent check found, with answers made up by a handler in front of
// the real document.

const (
	rateOK  = "X-RateLimit-Limit:20|X-RateLimit-Remaining:19|X-RateLimit-Reset:1"
	jobPath = "/v1/bulk/6f1d7a38-0c7e-4d8a-9b8e-2f3a4b5c6d7e"
)

// exchange runs one request through Handler with a handler answering
// status, body and headers ("Name:value|..."), and returns the mismatches.
func exchange(t *testing.T, method, target string, reqHeaders map[string]string, status int, headers, body string) []string {
	t.Helper()
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Request-ID", "r1")
		for _, kv := range strings.Split(headers, "|") {
			if k, v, ok := strings.Cut(kv, ":"); ok {
				w.Header()[k] = []string{v} // the server's own spelling, as apiserver sets them
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}), func(p []string) { got = append(got, p...) })
	req := httptest.NewRequest(method, target, nil)
	for k, v := range reqHeaders {
		req.Header.Set(k, v)
	}
	h.ServeHTTP(httptest.NewRecorder(), req)
	return got
}

func wantMismatch(t *testing.T, got []string, part string) {
	t.Helper()
	for _, g := range got {
		if strings.Contains(g, part) {
			return
		}
	}
	t.Errorf("no mismatch mentioning %q; got %q", part, got)
}

func TestCheckerRules(t *testing.T) {
	key := map[string]string{"X-API-Key": "k"}
	const credits = `{"credits":1,"user_id":"u"}`
	const unavailable = `{"detail":"x","code":"temporarily_unavailable"}`

	if got := exchange(t, "GET", "/v1/credits", key, 200, rateOK, credits); len(got) != 0 {
		t.Errorf("a matching exchange: %q", got)
	}
	// A status the operation does not document.
	wantMismatch(t, exchange(t, "GET", "/v1/credits", key, 418, rateOK, `{"detail":"x"}`), "status is not supported")
	// A header the document requires, missing.
	wantMismatch(t, exchange(t, "GET", "/v1/credits", key, 200, "", credits), `"X-RateLimit-Limit" missing`)
	// A body off its schema.
	wantMismatch(t, exchange(t, "GET", "/v1/credits", key, 200, rateOK, `{"credits":"1"}`), "does not match")
	// 503 before the key was counted: no rate headers, which is right.
	if got := exchange(t, "GET", jobPath, key, 503, "Retry-After:1", unavailable); len(got) != 0 {
		t.Errorf("503 temporarily_unavailable without rate headers: %q", got)
	}
	// A 2xx to a request the document refuses (no API key).
	wantMismatch(t, exchange(t, "GET", "/v1/credits", nil, 200, rateOK, credits), "accepted a request the document refuses")
	// A 422 on a parameter the document accepts: issue 26's Idempotency-Key.
	long := strings.Repeat("k", 255)
	refused := `{"detail":"x","errors":[{"loc":"header.Idempotency-Key","msg":"x","type":"string_too_long"}]}`
	wantMismatch(t, exchange(t, "GET", "/v1/verify?email=a@b.example", map[string]string{"X-API-Key": "k", "Idempotency-Key": long}, 422, rateOK, refused),
		"which the document accepts")
	if got := exchange(t, "GET", "/v1/verify?email=a@b.example", map[string]string{"X-API-Key": "k", "Idempotency-Key": long + "k"}, 422, rateOK, refused); len(got) != 0 {
		t.Errorf("a 256-character Idempotency-Key refused: %q", got)
	}
	// Answers every operation shares, stated once in info.description.
	wantMismatch(t, exchange(t, "GET", "/v1/credits", key, 200, rateOK+"|Cache-Control:max-age=60", credits), "no-store")
	// No documented operation: an unknown /v1 path is 404, another method 405.
	wantMismatch(t, exchange(t, "GET", "/v1/nothing", key, 200, "", `{}`), "must be 404")
	if got := exchange(t, "GET", "/v1/nothing", key, 404, "", `{"detail":"Not found"}`); len(got) != 0 {
		t.Errorf("404 on an unknown path: %q", got)
	}
	wantMismatch(t, exchange(t, "DELETE", "/v1/credits", key, 404, "", `{"detail":"x"}`), "must be 405")
	wantMismatch(t, exchange(t, "DELETE", "/v1/credits", key, 405, "", `{"detail":"x"}`), "Allow")
	// Not the API's: left alone.
	if got := exchange(t, "GET", "/dashboard/", nil, 200, "", "<html>"); len(got) != 0 {
		t.Errorf("the dashboard checked: %q", got)
	}
}

func TestDocumentedPairsAreCounted(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	want := Pair{Method: "GET", Path: "/v1/credits", Status: "429"}
	before := c.Seen()[want]
	exchange(t, "GET", "/v1/credits", map[string]string{"X-API-Key": "k"}, 429, rateOK+"|Retry-After:1", `{"detail":"x","code":"rate_limited"}`)
	if c.Seen()[want] != before+1 {
		t.Errorf("%v not counted", want)
	}
	found := false
	for _, p := range c.Documented() {
		found = found || p == want
	}
	if !found {
		t.Errorf("%v not among the documented pairs", want)
	}
}
