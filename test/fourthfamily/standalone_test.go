package fourthfamily_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/fourthfamily"
)

// env is a standalone bulkd with the phone lookup family registered.
type env struct {
	t     *testing.T
	url   string
	parts *serve.Components
	c     *http.Client
}

func start(t *testing.T) *env {
	t.Helper()
	rdb, _ := testredis.Client(t)
	cfg := config.Default()
	cfg.RedirectChecks = false
	cfg.Workers = 2
	cfg.DashboardAllowHTTP = true
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	parts, err := serve.BuildWith(cfg, rdb, log, serve.Options{Families: []serve.Extra{fourthfamily.Extra(&fourthfamily.Family{})}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	parts.Local.Start(ctx)
	t.Cleanup(func() { cancel(); parts.Local.Wait() })
	ts := httptest.NewServer(parts.API)
	t.Cleanup(ts.Close)
	return &env{t: t, url: ts.URL, parts: parts, c: &http.Client{Timeout: 30 * time.Second}}
}

func (e *env) do(method, path, key string, body string) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.url+path, r)
	req.Header.Set("X-API-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := e.c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// TestPhoneLookupOverTheAPI: a bulk submission of the fourth family, its
// status, its results (JSON and CSV), and its single request, each charged
// at the family's price, through the API's generic handlers.
func TestPhoneLookupOverTheAPI(t *testing.T) {
	e := start(t)
	acct, key := bulkdtest.NewAccount(t, e.parts, "phone", credits.Whole(10))
	st, b := e.do("POST", "/v1/phone-lookup/bulk", key,
		`{"input":[{"phone":"+1 555 0100"},{"phone":"1-555-0100"},{"phone":"15550101"},{"phone":"999"}]}`)
	if st != http.StatusOK {
		t.Fatalf("submit: %d %s", st, b)
	}
	var sub struct {
		JobID   string         `json:"job_id"`
		Charged credits.Amount `json:"credits_consumed"`
	}
	decode(t, b, &sub)
	if sub.Charged != 3*fourthfamily.Price { // three distinct numbers
		t.Fatalf("charged %s", sub.Charged)
	}
	if got := bulkdtest.BalanceOf(t, e.parts, acct); got != credits.Whole(10)-3*fourthfamily.Price {
		t.Fatalf("balance %s", got)
	}
	var status fourthfamily.Status
	bulkdtest.Eventually(t, 20*time.Second, 50*time.Millisecond, "the job completes", func() bool {
		st, b := e.do("GET", "/v1/phone-lookup/bulk/"+sub.JobID, key, "")
		if st != http.StatusOK {
			t.Fatalf("status: %d %s", st, b)
		}
		decode(t, b, &status)
		return status.Status == "completed"
	})
	if status.Summary["found"] != 2 || status.Summary["not_found"] != 1 || status.Processed != 3 {
		t.Fatalf("status %+v", status)
	}
	st, b = e.do("GET", "/v1/phone-lookup/bulk/"+sub.JobID+"/results", key, "")
	var page struct {
		TotalRows int64              `json:"total_rows"`
		Results   []fourthfamily.Row `json:"results"`
	}
	decode(t, b, &page)
	want := []fourthfamily.Row{{Phone: "+1 555 0100", Status: "found", Carrier: "Acme Mobile", LineType: "mobile"},
		{Phone: "15550101", Status: "found", Carrier: "Initech Telecom", LineType: "landline"},
		{Phone: "999", Status: "not_found"}}
	if st != http.StatusOK || len(page.Results) != len(want) {
		t.Fatalf("results: %d %s", st, b)
	}
	for i := range want {
		if page.Results[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, page.Results[i], want[i])
		}
	}
	st, b = e.do("GET", "/v1/phone-lookup/bulk/"+sub.JobID+"/results?format=csv", key, "")
	if st != http.StatusOK || !strings.HasPrefix(string(b), "phone,status,carrier,line_type\n") || !strings.Contains(string(b), "15550101,found,Initech Telecom,landline") {
		t.Fatalf("csv: %d %s", st, b)
	}
	// Another family's endpoints do not know the job.
	if st, _ := e.do("GET", "/v1/bulk-lookup/"+sub.JobID, key, ""); st != http.StatusNotFound {
		t.Fatalf("lookup endpoint read a phone job: %d", st)
	}

	// The single request: charged when found, refunded when not kept,
	// refused before any charge when invalid.
	before := bulkdtest.BalanceOf(t, e.parts, acct)
	st, b = e.do("GET", "/v1/phone-lookup?phone=%2B1-555-0102", key, "")
	if st != http.StatusOK || !strings.Contains(string(b), `"carrier":"Acme Mobile"`) || !strings.Contains(string(b), `"credits_consumed":0.5`) {
		t.Fatalf("single: %d %s", st, b)
	}
	st, b = e.do("GET", "/v1/phone-lookup?phone=123", key, "")
	if st != http.StatusOK || !strings.Contains(string(b), `"credits_consumed":0`) {
		t.Fatalf("single not found: %d %s", st, b)
	}
	if st, b := e.do("GET", "/v1/phone-lookup", key, ""); st != http.StatusUnprocessableEntity {
		t.Fatalf("single without a number: %d %s", st, b)
	}
	if got := bulkdtest.BalanceOf(t, e.parts, acct); got != before-fourthfamily.Price {
		t.Fatalf("balance after the single requests %s, want %s", got, before-fourthfamily.Price)
	}
}

var (
	csrfRE  = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	draftRE = regexp.MustCompile(`action="/dashboard/jobs/new/([A-Za-z0-9_-]+)"`)
	jobRE   = regexp.MustCompile(`id="job-id">([0-9a-f-]{36})<`)
)

// browser is a cookie-keeping client that sends a browser's Origin.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (b *browser) send(req *http.Request) (int, string) {
	b.t.Helper()
	req.Header.Set("Origin", b.base)
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func (b *browser) get(path string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.send(req)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.send(req)
}

func (b *browser) upload(path string, fields map[string]string, name, file string) (int, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = io.WriteString(fw, file)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return b.send(req)
}

func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token:\n%s", page)
	}
	return m[1]
}

// TestPhoneLookupInTheDashboard: the dashboard's new-job form offers the
// fourth family from its form (label, hint, field, column aliases), builds
// its body, quotes it, submits it and shows the job with its label.
func TestPhoneLookupInTheDashboard(t *testing.T) {
	e := start(t)
	d := e.parts.Dashboard
	acct, _ := bulkdtest.NewAccount(t, e.parts, "phone", credits.Whole(10))
	if _, err := d.Users.Create(context.Background(), acct, "phone@example.com", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	b := &browser{t: t, base: e.url, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	if st, body := b.post(dashboard.Base+"/login", url.Values{"email": {"phone@example.com"}, "password": {"correct horse battery"}}); st != http.StatusOK {
		t.Fatalf("sign in: %d\n%s", st, body)
	}
	_, page := b.get(dashboard.Base + "/jobs/new")
	if !strings.Contains(page, `id="family-phone_lookup" value="phone_lookup"`) || !strings.Contains(page, "<strong>Phone lookup</strong>") ||
		!strings.Contains(page, fourthfamily.Form.Hint) {
		t.Fatalf("the new-job form does not offer the phone lookup:\n%s", page)
	}
	// "Mobile" is one of the form's aliases: the column is mapped by it.
	st, body := b.upload(dashboard.Base+"/jobs/new", map[string]string{"csrf_token": csrf(t, page), "family": "phone_lookup", "pay": "credits"},
		"phones.csv", "Name,Mobile\nAda,+1 555 0100\nGrace,15550102\nAlan,1-555-0100\n")
	m := draftRE.FindStringSubmatch(body)
	if st != http.StatusOK || m == nil || !strings.Contains(body, `<select id="map-phone" name="map_phone">`) ||
		!regexp.MustCompile(`<option value="1" selected>Column 2: Mobile</option>`).MatchString(body) {
		t.Fatalf("mapping: %d\n%s", st, body)
	}
	st, body = b.post(dashboard.Base+"/jobs/new/"+m[1], url.Values{"csrf_token": {csrf(t, body)}, "has_header": {"1"}, "map_phone": {"1"}})
	if st != http.StatusOK || !strings.Contains(body, `data-testid="quote-cost">1 credit`) {
		t.Fatalf("review (two distinct numbers at 0.5): %d\n%s", st, body)
	}
	st, body = b.post(dashboard.Base+"/jobs/new/"+m[1]+"/confirm", url.Values{"csrf_token": {csrf(t, body)}})
	if st != http.StatusOK || jobRE.FindStringSubmatch(body) == nil || !strings.Contains(body, "Phone lookup job") {
		t.Fatalf("confirm: %d\n%s", st, body)
	}
	if got := bulkdtest.BalanceOf(t, e.parts, acct); got != credits.Whole(10)-2*fourthfamily.Price {
		t.Fatalf("balance %s", got)
	}
}
