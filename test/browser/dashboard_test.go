package browser

import (
	"context"
	"encoding/csv"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/browsertest"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/mailworld"
)

const password = "correct horse battery staple"

// pageBudget is the most one page may transfer, assets included, with the
// browser's cache off.
const pageBudget = 200 << 10

// suite is a standalone bulkd with its dashboard over plain HTTP, a mail
// world for the email families, and a headless Chromium.
type suite struct {
	t  *testing.T
	e  *bulkdtest.Env
	d  *dashboard.Dashboard
	w  *mailworld.World
	b  *browsertest.Browser
	ok map[string]bool // pages audited
}

func start(t *testing.T) *suite {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := mailworld.Start(ctx, mailworld.Classes(mailworld.ClassOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	e := bulkdtest.Start(t, bulkdtest.WithMailWorld(w), bulkdtest.WithConfig(func(c *config.Config) { c.DashboardAllowHTTP = true }))
	e.PutCompanies(company.Record{NetworkURL: new("https://www.linkedin.com/company/northwind-traders"), Name: new("Northwind Traders"),
		Website: new("https://northwind.example"), Domain: new("northwind.example")})
	d := e.Parts.Dashboard
	if d == nil {
		t.Fatal("the API mounts no dashboard")
	}
	b := browsertest.Start(t)
	if dir := os.Getenv("BULKD_SCREENSHOTS"); dir == "" {
		b.Shots = filepath.Join(os.TempDir(), "bulkd-dashboard-screenshots")
		_ = os.MkdirAll(b.Shots, 0o755)
	}
	t.Logf("screenshots in %s", b.Shots)
	// Every page is weighed whole: no asset comes from the cache.
	if _, err := chromedp.Call(b.Context(), network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatal(err)
	}
	return &suite{t: t, e: e, d: d, w: w, b: b, ok: map[string]bool{}}
}

// user makes an account with balance and a dashboard user.
func (s *suite) user(balance credits.Amount) (acct, email string) {
	s.t.Helper()
	acct, _ = s.e.Account(balance)
	email = "owner-" + acct + "@example.com"
	if _, err := s.d.Users.Create(context.Background(), acct, email, password); err != nil {
		s.t.Fatal(err)
	}
	return acct, email
}

// open navigates to path and waits for sel.
func (s *suite) open(path, sel string) {
	s.t.Helper()
	s.b.ResetWeight()
	s.b.Run("open "+path, chromedp.Navigate(s.e.URL+path), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// check audits the page on screen, weighs what it transferred since the
// last ResetWeight, and saves a screenshot as name.
func (s *suite) check(name string) {
	s.t.Helper()
	// Let late assets (the script, the stylesheet) finish counting.
	s.b.Run("settle", chromedp.Sleep(150*time.Millisecond))
	total, by := s.b.Transferred()
	if total > pageBudget {
		s.t.Errorf("%s: %d bytes transferred (budget %d): %v", name, total, pageBudget, by)
	}
	for u := range by {
		if !strings.HasPrefix(u, s.e.URL) && !strings.HasPrefix(u, "data:") {
			s.t.Errorf("%s: loads %s from elsewhere (the dashboard must work offline)", name, u)
		}
	}
	problems := browsertest.Get(s.b, "audit "+name, chromedp.Evaluate[[]string](auditJS))
	for _, p := range problems {
		s.t.Errorf("%s: accessibility: %s", name, p)
	}
	s.b.Screenshot(name)
	s.t.Logf("%s: %d bytes, %d accessibility problems", name, total, len(problems))
}

// signIn signs in with the keyboard only: Tab to the e-mail field, type,
// Tab to the password, type, Enter.
func (s *suite) signIn(email string) {
	s.t.Helper()
	s.open(dashboard.Base+"/login", "#login-email")
	focused := func() string {
		return browsertest.Get(s.b, "focused element", chromedp.Evaluate[string](`document.activeElement ? document.activeElement.id : ""`))
	}
	for i := 0; i < 15 && focused() != "login-email"; i++ {
		s.b.Run("tab", chromedp.KeyEvent("\t"))
	}
	if focused() != "login-email" {
		s.t.Fatal("Tab never reaches the e-mail field")
	}
	if ring := browsertest.Get(s.b, "focus ring", chromedp.Evaluate[string](
		`(() => { const cs = getComputedStyle(document.activeElement); return cs.outlineStyle + " " + cs.outlineWidth + " " + cs.boxShadow })()`)); strings.HasPrefix(ring, "none") && strings.HasSuffix(ring, "none") {
		s.t.Errorf("the focused field shows no focus ring: %s", ring)
	}
	s.b.Run("type the e-mail", chromedp.KeyEvent(email), chromedp.KeyEvent("\t"))
	if focused() != "login-password" {
		s.t.Fatalf("Tab from the e-mail field goes to %q", focused())
	}
	s.b.ResetWeight()
	s.b.Run("type the password and press Enter", chromedp.KeyEvent(password), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS("#credit-balance")))
}

func (s *suite) sessionCookie() *network.Cookie {
	s.t.Helper()
	r, err := chromedp.Call(s.b.Context(), network.GetCookies, network.GetCookiesParams{URLs: []string{s.e.URL + dashboard.Base + "/"}})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range r.Cookies {
		if c.Name == dashboard.CookieName {
			return c
		}
	}
	return nil
}

// TestDashboardInABrowser walks the dashboard as a customer does: signs in
// (keyboard only, a fixated session id replaced), makes a key and uses it
// on the API, revokes it and sees the API refuse it, runs a CSV job of each
// family to completion and downloads its results (equal to the API's for
// the same list), is refused over the quota with the API's message, and
// reads the ledger. Every page is audited, weighed and photographed.
func TestDashboardInABrowser(t *testing.T) {
	s := start(t)
	acct, email := s.user(100 * credits.Scale)

	// Signed out: the dashboard sends you to sign in.
	s.open(dashboard.Base+"/", "#login-email")
	if u := s.b.Location(); !strings.Contains(u, dashboard.Base+"/login") {
		t.Fatalf("signed out, %s", u)
	}
	s.check("01-sign-in")

	// Session fixation: a session id planted before signing in is not the
	// one signing in gives.
	if _, err := chromedp.Call(s.b.Context(), network.SetCookie, network.SetCookieParams{Name: dashboard.CookieName,
		Value: "planted-by-an-attacker", URL: s.e.URL + dashboard.Base + "/", Path: dashboard.Base}); err != nil {
		t.Fatal(err)
	}
	s.signIn(email)
	c := s.sessionCookie()
	if c == nil || c.Value == "planted-by-an-attacker" || !c.HTTPOnly || c.SameSite != network.CookieSameSiteLax {
		t.Fatalf("session cookie after sign-in: %+v", c)
	}
	s.check("02-overview")

	// A key, shown once, works on the API; revoked, it does not.
	s.open(dashboard.Base+"/keys", "#create-key-submit")
	s.check("03-keys")
	s.b.Run("create a key", chromedp.Click(chromedp.CSS("#create-key-submit")), chromedp.WaitVisible(chromedp.CSS("#new-key-value")))
	key := s.b.Text("#new-key-value")
	s.check("04-key-created")
	if r := s.e.Get("/v1/credits", key); r.Status != http.StatusOK {
		t.Fatalf("the new key on the API: %d %s", r.Status, r.Body)
	}
	prefix := "bkd_" + accounts.KeyIDOf(key)
	s.b.Run("revoke", chromedp.Click(chromedp.CSS(`[data-testid="revoke-`+prefix+`"]`)), chromedp.WaitVisible(chromedp.CSS("#revoke-confirm")))
	s.check("05-revoke-confirm")
	s.b.Run("confirm the revocation", chromedp.Click(chromedp.CSS("#revoke-confirm")), chromedp.WaitVisible(chromedp.CSS("#keys")))
	if r := s.e.Get("/v1/credits", key); r.Status != http.StatusUnauthorized {
		t.Fatalf("the revoked key on the API: %d %s", r.Status, r.Body)
	}

	// A CSV job of each family, from upload to download.
	_, apiKey := s.e.Account(100 * credits.Scale)
	dir := t.TempDir()
	for i, c := range []struct {
		family, file, csv, path, cost string
		body                          any
	}{
		{"company_enrichment", "companies.csv", "Company LinkedIn,Website\nhttps://www.linkedin.com/company/northwind-traders,\n,unknown-company.example\n",
			"/v1/company-enrichment/bulk", "2 credits", map[string]any{"input": []map[string]string{
				{"network_url": "https://www.linkedin.com/company/northwind-traders"}, {"domain": "unknown-company.example"}}}},
		{"email_verification", "emails.csv", "email\nalice@ok.test\nnobody@ok.test\nbob@ok.test\n",
			"/v1/bulk", "0.6 credits", map[string]any{"emails": []string{"alice@ok.test", "nobody@ok.test", "bob@ok.test"}}},
		{"email_lookup", "people.csv", "First Name,Last Name,Company Domain\nAlice,Archer,ok.test\nZed,Nobody,nxdomain.test\n",
			"/v1/bulk-lookup", "2 credits", map[string]any{"input": []map[string]string{
				{"first_name": "Alice", "last_name": "Archer", "domain": "ok.test"}, {"first_name": "Zed", "last_name": "Nobody", "domain": "nxdomain.test"}}}},
	} {
		file := filepath.Join(dir, c.file)
		if err := os.WriteFile(file, []byte(c.csv), 0o644); err != nil {
			t.Fatal(err)
		}
		s.open(dashboard.Base+"/jobs/new", "#upload-submit")
		if i == 0 {
			s.check("06-new-job")
		}
		s.b.Run("upload "+c.file, chromedp.Click(chromedp.CSS("#family-"+c.family)), chromedp.Click(chromedp.CSS("#pay-credits")),
			chromedp.SetUploadFiles(chromedp.CSS("#job-file"), []string{file}))
		s.b.ResetWeight()
		s.b.Run("continue", chromedp.Click(chromedp.CSS("#upload-submit")), chromedp.WaitVisible(chromedp.CSS("#map-columns")))
		s.check("07-map-" + c.family)
		s.b.ResetWeight()
		s.b.Run("review", chromedp.Click(chromedp.CSS("#review-submit")), chromedp.WaitVisible(chromedp.CSS("#confirm-job")))
		if cost := s.b.Text(`[data-testid="quote-cost"]`); cost != c.cost {
			t.Errorf("%s: the confirmation shows %q, want %q", c.family, cost, c.cost)
		}
		s.check("08-confirm-" + c.family)
		s.b.ResetWeight()
		s.b.Run("confirm", chromedp.Click(chromedp.CSS("#confirm-submit")), chromedp.WaitVisible(chromedp.CSS("#job-id")))
		id := s.b.Text("#job-id")
		// The page follows the job live (no reload).
		deadline := time.Now().Add(90 * time.Second)
		for st := s.b.Text("#job-status"); st != "completed" && st != "complete"; st = s.b.Text("#job-status") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: job %s still %q", c.family, id, st)
			}
			time.Sleep(300 * time.Millisecond)
		}
		s.open(dashboard.Base+"/jobs/"+id, "#download-csv")
		s.check("09-job-" + c.family)
		got := browsertest.Get(s.b, "download the CSV", chromedp.Evaluate[string](
			`fetch(document.querySelector('#download-csv').href).then(r => r.text())`, chromedp.EvalAwaitPromise))

		// The same list through the API gives the same CSV.
		r := s.e.PostJSON(c.path, apiKey, c.body)
		if r.Status != http.StatusOK {
			t.Fatalf("%s through the API: %d %s", c.family, r.Status, r.Body)
		}
		var sub struct {
			JobID string `json:"job_id"`
		}
		r.Decode(t, &sub)
		s.e.WaitFor(c.path+"/"+sub.JobID, apiKey, 90*time.Second)
		want := s.e.Get(c.path+"/"+sub.JobID+"/results?format=csv", apiKey)
		if a, b := stable(t, got), stable(t, string(want.Body)); a != b || len(a) < 3 {
			t.Errorf("%s: the dashboard's CSV:\n%s\nthe API's:\n%s", c.family, got, want.Body)
		}
		// And it says what the API's JSON rows say.
		sameAsJSON(t, c.family, got, s.e.Get(c.path+"/"+sub.JobID+"/results?limit=500", apiKey))
	}
	s.open(dashboard.Base+"/jobs", "#jobs")
	s.check("10-jobs")

	// Over the quota: refused with the API's message, nothing taken.
	ctx := context.Background()
	if err := s.e.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	limit := s.e.Parts.API.Plans[accounts.PlanStarter].DailyBulkSearches
	window := billing.DailyWindow(billing.BulkSearches, s.e.Clock.Now())
	if _, err := s.e.Parts.API.Billing.Consume(ctx, billing.Consumption{AccountID: acct, KeyID: "test", ChargeID: "earlier-today",
		Window: window, N: limit - 1, Limit: limit}); err != nil {
		t.Fatal(err)
	}
	s.open(dashboard.Base+"/", "#credit-balance")
	s.check("11-overview-plan")
	s.open(dashboard.Base+"/jobs/new", "#upload-submit")
	s.b.Run("paste two people", chromedp.Click(chromedp.CSS("#family-email_lookup")), chromedp.Click(chromedp.CSS("#pay-quota")),
		chromedp.SendKeys(chromedp.CSS("#job-paste"), "Alice,Archer,ok.test\nBob,Baker,ok.test"),
		chromedp.Click(chromedp.CSS("#upload-submit")), chromedp.WaitVisible(chromedp.CSS("#map-columns")),
		chromedp.Click(chromedp.CSS("#review-submit")), chromedp.WaitVisible(chromedp.CSS("#confirm-job")))
	s.b.ResetWeight()
	s.b.Run("confirm over the quota", chromedp.Click(chromedp.CSS("#confirm-submit")), chromedp.WaitVisible(chromedp.CSS("#error")))
	msg := s.b.Text("#error")
	ukey := s.e.Key(acct, accounts.Unlimited)
	r := s.e.PostJSON("/v1/unlimited/bulk-lookup", ukey, map[string]any{"input": []map[string]string{
		{"first_name": "Alice", "last_name": "Archer", "domain": "ok.test"}, {"first_name": "Bob", "last_name": "Baker", "domain": "ok.test"}}})
	var apiErr struct {
		Detail string `json:"detail"`
	}
	r.Decode(t, &apiErr)
	if r.Status != http.StatusTooManyRequests || apiErr.Detail == "" || !strings.Contains(msg, apiErr.Detail) {
		t.Errorf("over the quota: the dashboard says %q; the API %d %q", msg, r.Status, apiErr.Detail)
	}
	s.check("12-over-quota")
	if used, _ := s.e.Parts.API.Billing.Used(ctx, acct, window); used != limit-1 {
		t.Errorf("quota used %d after the refusal, want %d", used, limit-1)
	}

	s.open(dashboard.Base+"/ledger", "#ledger")
	s.check("13-ledger")

	// Signing out ends the session for good.
	s.b.Run("sign out", chromedp.Click(chromedp.CSS("#logout-submit")), chromedp.WaitVisible(chromedp.CSS("#login-email")))
	s.open(dashboard.Base+"/keys", "#login-email")
}

// TestCrossSiteFormRefused: a page on another origin that posts a form to
// the dashboard (to make a key) while the user is signed in is refused
// (403), and no key is made.
func TestCrossSiteFormRefused(t *testing.T) {
	s := start(t)
	acct, email := s.user(10 * credits.Scale)
	s.signIn(email)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><html lang="en"><body><form id="f" method="post" action="` + s.e.URL + dashboard.Base + `/keys">
<input type="hidden" name="type" value="payg"><input type="hidden" name="csrf_token" value="guessed"></form>
<script>document.getElementById('f').submit()</script></body></html>`))
	}))
	defer evil.Close()
	s.b.Run("visit the other site", chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS("#error-heading")))
	if h := s.b.Text("#error-heading"); !strings.Contains(strings.ToLower(h), "refused") {
		t.Errorf("cross-site post: %q", h)
	}
	s.b.Screenshot("14-cross-site-refused")
	keys, err := s.e.Parts.API.Accounts.Keys(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 { // the one bulkdtest made with the account
		t.Fatalf("%d keys after the cross-site post, want 1", len(keys))
	}
}

// stable is a CSV without its timestamp columns (*_at: when each answer was
// made differs between two jobs of the same list).
func stable(t *testing.T, text string) string {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		t.Fatalf("CSV: %v\n%s", err, text)
	}
	var b strings.Builder
	for _, rec := range recs {
		for i, cell := range rec {
			if !strings.HasSuffix(recs[0][i], "_at") {
				b.WriteString(cell + "\x1f")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// sameAsJSON checks that every CSV row carries the scalar fields of the
// API's JSON row at the same position (timestamps aside).
func sameAsJSON(t *testing.T, family, text string, r bulkdtest.Response) {
	t.Helper()
	var page struct {
		Results []map[string]any `json:"results"`
	}
	r.Decode(t, &page)
	rows := page.Results
	recs, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs)-1 != len(rows) {
		t.Fatalf("%s: %d CSV rows, %d JSON rows: %s", family, len(recs)-1, len(rows), r.Body)
	}
	for i, rec := range recs[1:] {
		for j, col := range recs[0] {
			v, ok := rows[i][col]
			if !ok || strings.HasSuffix(col, "_at") {
				continue
			}
			var want string
			switch x := v.(type) {
			case nil:
				want = ""
			case string:
				want = x
			case bool:
				want = strconv.FormatBool(x)
			case float64:
				want = strconv.FormatFloat(x, 'f', -1, 64)
			default:
				continue // nested values are flattened by their own rule
			}
			if rec[j] != want {
				t.Errorf("%s row %d %s: CSV %q, JSON %q", family, i, col, rec[j], want)
			}
		}
	}
}
