package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

// start runs a standalone bulkd whose dashboard cookie works over the
// test's plain HTTP.
func start(t *testing.T, opts ...bulkdtest.Option) (*bulkdtest.Env, *dashboard.Dashboard) {
	t.Helper()
	opts = append(opts, bulkdtest.WithConfig(func(c *config.Config) { c.DashboardAllowHTTP = true }))
	e := bulkdtest.Start(t, opts...)
	d := e.Parts.Dashboard
	if d == nil {
		t.Fatal("the API mounts no dashboard")
	}
	return e, d
}

// browser is an HTTP client with a cookie jar that sends the Origin a
// browser would.
type browser struct {
	t      *testing.T
	base   string
	c      *http.Client
	origin string
	last   *http.Response
	// forwardedFor, when set, is sent as X-Forwarded-For (what a proxy
	// in front of bulkd, or a client pretending, sends).
	forwardedFor string
}

func newBrowser(t *testing.T, e *bulkdtest.Env) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: e.URL, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}, origin: e.URL}
}

func (b *browser) do(req *http.Request) (int, string) {
	b.t.Helper()
	if b.forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", b.forwardedFor)
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	b.last = res
	return res.StatusCode, string(body)
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	return b.do(req)
}

func (b *browser) postMultipart(path string, fields map[string]string, fileName, file string) (int, string) {
	b.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	if fileName != "" {
		fw, _ := mw.CreateFormFile("file", fileName)
		_, _ = io.WriteString(fw, file)
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Origin", b.origin)
	return b.do(req)
}

func (b *browser) cookie() string {
	u, _ := url.Parse(b.base + dashboard.Base + "/")
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == dashboard.CookieName {
			return c.Value
		}
	}
	return ""
}

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in page:\n%s", page)
	}
	return m[1]
}

// user makes an account with balance and a dashboard user with a password.
func user(t *testing.T, e *bulkdtest.Env, d *dashboard.Dashboard, balance credits.Amount) (acct, email, key string) {
	t.Helper()
	acct, key = e.Account(balance)
	email = "u-" + acct + "@example.com"
	if _, err := d.Users.Create(context.Background(), acct, email, "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	return acct, email, key
}

func (b *browser) signIn(email, password string) (int, string) {
	b.t.Helper()
	return b.post(dashboard.Base+"/login", url.Values{"email": {email}, "password": {password}})
}

func signedIn(t *testing.T, e *bulkdtest.Env, d *dashboard.Dashboard, balance credits.Amount) (*browser, string, string) {
	t.Helper()
	acct, email, key := user(t, e, d, balance)
	b := newBrowser(t, e)
	if st, body := b.signIn(email, "correct horse battery"); st != http.StatusOK || !strings.Contains(body, `id="credit-balance"`) {
		t.Fatalf("sign in: %d\n%s", st, body)
	}
	return b, acct, key
}

func TestSignIn(t *testing.T) {
	e, d := start(t)
	_, email, _ := user(t, e, d, 1000*credits.Scale)
	b := newBrowser(t, e)

	// Not signed in: every page sends to the sign-in form.
	st, body := b.get(dashboard.Base + "/keys")
	if st != http.StatusOK || !strings.Contains(body, `<form method="post" action="/dashboard/login" id="login"`) {
		t.Fatalf("keys without a session: %d\n%s", st, body)
	}
	if !strings.Contains(b.last.Request.URL.String(), "next=%2Fdashboard%2Fkeys") {
		t.Fatalf("redirected to %s", b.last.Request.URL)
	}

	// Wrong password and unknown email: the same generic message.
	st, wrong := b.signIn(email, "not the password")
	st2, unknown := b.signIn("nobody@example.com", "not the password")
	if st != http.StatusUnauthorized || st2 != http.StatusUnauthorized {
		t.Fatalf("wrong password %d, unknown email %d", st, st2)
	}
	msg := html.EscapeString("The email or password is not right")
	if !strings.Contains(wrong, msg) || !strings.Contains(unknown, msg) {
		t.Fatalf("sign-in errors differ or are missing:\n%s\n%s", wrong, unknown)
	}

	// Session fixation: a cookie the browser brings is replaced.
	u, _ := url.Parse(e.URL + dashboard.Base + "/")
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: dashboard.CookieName, Value: "attacker-chosen", Path: dashboard.Base}})
	nb := &http.Client{Jar: b.c.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, e.URL+dashboard.Base+"/login",
		strings.NewReader(url.Values{"email": {strings.ToUpper(email)}, "password": {"correct horse battery"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.URL)
	res, err := nb.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.StatusCode)
	}
	set := res.Header.Get("Set-Cookie")
	for _, want := range []string{dashboard.CookieName + "=", "Path=/dashboard", "HttpOnly", "SameSite=Lax"} {
		if !strings.Contains(set, want) {
			t.Fatalf("Set-Cookie %q lacks %q", set, want)
		}
	}
	if c := b.cookie(); c == "" || c == "attacker-chosen" || len(c) < 43 {
		t.Fatalf("session cookie after sign-in: %q", c)
	}
	st, body = b.get(dashboard.Base + "/")
	if st != http.StatusOK || !strings.Contains(body, `id="credit-balance"`) || !strings.Contains(body, "1000") {
		t.Fatalf("overview: %d\n%s", st, body)
	}
	for _, want := range []string{`<html lang="en">`, `<main id="main"`, `<nav aria-label="Main"`, `id="quota-reset"`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
}

func TestSecureCookieByDefault(t *testing.T) {
	e := bulkdtest.Start(t)
	d := e.Parts.Dashboard
	_, email, _ := user(t, e, d, 0)
	nb := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, e.URL+dashboard.Base+"/login",
		strings.NewReader(url.Values{"email": {email}, "password": {"correct horse battery"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.URL)
	res, err := nb.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if set := res.Header.Get("Set-Cookie"); res.StatusCode != http.StatusSeeOther || !strings.Contains(set, "Secure") {
		t.Fatalf("%d Set-Cookie %q", res.StatusCode, set)
	}
}

// wrongUntil429 signs in with a wrong password until the dashboard
// answers 429, at most n times; it returns the 401s before it and the
// Retry-After.
func (b *browser) wrongUntil429(email string, n int) (int, int) {
	b.t.Helper()
	for i := 0; i < n; i++ {
		st, body := b.signIn(email, "wrong password")
		switch st {
		case http.StatusUnauthorized:
			continue
		case http.StatusTooManyRequests:
			ra, err := strconv.Atoi(b.last.Header.Get("Retry-After"))
			if err != nil || !strings.Contains(body, "Too many sign-in attempts") {
				b.t.Fatalf("429 without Retry-After or message: %q\n%s", b.last.Header.Get("Retry-After"), body)
			}
			return i, ra
		default:
			b.t.Fatalf("wrong password: %d\n%s", st, body)
		}
	}
	return n, 0
}

// Issue 18 item 5: the sign-in throttle counts (email, client) with
// growing delays, not a lock on the email. Failures from one client are
// free 5 times, then wait 1 s, 2 s, 4 s … (60 s at most); a user on
// another client signs in at once meanwhile. Before, 10 failures from
// anywhere locked the email everywhere for 15 minutes.
func TestSignInThrottlePerClient(t *testing.T) {
	e, d := start(t, bulkdtest.WithConfig(func(c *config.Config) { c.TrustedProxies = "127.0.0.0/8" }))
	_, email, _ := user(t, e, d, 0)
	attacker := newBrowser(t, e)
	attacker.forwardedFor = "203.0.113.66"
	free, wait := attacker.wrongUntil429(email, 20)
	if free != 5 || wait != 1 {
		t.Fatalf("%d free failures, then Retry-After %d; want 5 and 1", free, wait)
	}
	// The delays grow while the failures go on, up to the cap.
	var waits []int
	for i := 0; i < 9; i++ {
		e.Clock.Set(e.Clock.Now().Add(time.Duration(wait) * time.Second))
		n, w := attacker.wrongUntil429(email, 3)
		if n != 1 {
			t.Fatalf("after waiting %d s: %d failures before a 429", wait, n)
		}
		wait = w
		waits = append(waits, w)
	}
	if fmt.Sprint(waits) != "[2 4 8 16 32 60 60 60 60]" {
		t.Fatalf("delays %v", waits)
	}
	// The right password from the held-back client waits too.
	if st, _ := attacker.signIn(email, "correct horse battery"); st != http.StatusTooManyRequests {
		t.Fatalf("held-back client, right password: %d", st)
	}
	// The user, on another client, is not held back at all.
	owner := newBrowser(t, e)
	owner.forwardedFor = "198.51.100.7"
	if st, body := owner.signIn(email, "correct horse battery"); st != http.StatusOK || !strings.Contains(body, `id="credit-balance"`) {
		t.Fatalf("the user from another client: %d\n%s", st, body)
	}
	// Nor is a client's other email.
	_, other, _ := user(t, e, d, 0)
	if st, _ := attacker.signIn(other, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("the held-back client's other email: %d", st)
	}
}

// X-Forwarded-For is believed only from --trusted-proxies, and only its
// right-most untrusted address: a client cannot make itself new clients
// by writing the header.
func TestSignInForwardedFor(t *testing.T) {
	t.Run("untrusted peer", func(t *testing.T) {
		e, d := start(t) // no trusted proxies: the TCP peer is the client
		_, email, _ := user(t, e, d, 0)
		b := newBrowser(t, e)
		for i := 0; i < 5; i++ {
			b.forwardedFor = fmt.Sprintf("192.0.2.%d", i+1)
			if st, _ := b.signIn(email, "wrong password"); st != http.StatusUnauthorized {
				t.Fatalf("attempt %d: %d", i+1, st)
			}
		}
		b.forwardedFor = "192.0.2.99"
		if st, _ := b.signIn(email, "wrong password"); st != http.StatusTooManyRequests {
			t.Fatalf("a made-up X-Forwarded-For from an untrusted peer escaped the throttle: %d", st)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		e, d := start(t, bulkdtest.WithConfig(func(c *config.Config) { c.TrustedProxies = "127.0.0.1/32, 10.0.0.0/8" }))
		_, email, _ := user(t, e, d, 0)
		b := newBrowser(t, e)
		// The client writes anything on the left; the proxies (10.x and
		// the peer) append what they saw: 203.0.113.5 is the client.
		for i := 0; i < 5; i++ {
			b.forwardedFor = fmt.Sprintf("192.0.2.%d, 203.0.113.5, 10.1.2.3", i+1)
			if st, _ := b.signIn(email, "wrong password"); st != http.StatusUnauthorized {
				t.Fatalf("attempt %d: %d", i+1, st)
			}
		}
		b.forwardedFor = "192.0.2.99, 203.0.113.5, 10.1.2.3"
		if st, _ := b.signIn(email, "wrong password"); st != http.StatusTooManyRequests {
			t.Fatalf("the client's own left entries made it a new client: %d", st)
		}
		b.forwardedFor = "203.0.113.6, 10.1.2.3"
		if st, _ := b.signIn(email, "correct horse battery"); st != http.StatusOK {
			t.Fatalf("another client behind the proxy: %d", st)
		}
	})
}

// Every client has an allowance of attempts over all emails (50 per 15
// minutes): one address cannot spray passwords over many emails. Other
// clients are not affected.
func TestSignInSprayGuard(t *testing.T) {
	e, d := start(t, bulkdtest.WithConfig(func(c *config.Config) { c.TrustedProxies = "127.0.0.1" }))
	_, email, _ := user(t, e, d, 0)
	b := newBrowser(t, e)
	b.forwardedFor = "203.0.113.77"
	for i := 0; i < 50; i++ {
		if st, _ := b.signIn(fmt.Sprintf("victim%d@example.com", i), "Password1!"); st != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, st)
		}
	}
	st, _ := b.signIn(email, "correct horse battery")
	if ra, _ := strconv.Atoi(b.last.Header.Get("Retry-After")); st != http.StatusTooManyRequests || ra < 1 || ra > 15*60 {
		t.Fatalf("51st attempt of the client: %d, Retry-After %q", st, b.last.Header.Get("Retry-After"))
	}
	b.forwardedFor = "203.0.113.78"
	if st, _ := b.signIn(email, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("another client: %d", st)
	}
}

// A password change ends the user's sessions: whoever had signed in
// (with the old password or a copied cookie) is out. Before, sessions
// outlived the change.
func TestPasswordChangeEndsSessions(t *testing.T) {
	e, d := start(t)
	_, email, _ := user(t, e, d, 0)
	b1, b2 := newBrowser(t, e), newBrowser(t, e)
	for _, b := range []*browser{b1, b2} {
		if st, _ := b.signIn(email, "correct horse battery"); st != http.StatusOK {
			t.Fatalf("sign in: %d", st)
		}
	}
	u, _, err := d.Users.ByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Users.SetPassword(context.Background(), u.ID, "a brand new password"); err != nil {
		t.Fatal(err)
	}
	for i, b := range []*browser{b1, b2} {
		if _, body := b.get(dashboard.Base + "/keys"); !strings.Contains(body, `id="login"`) {
			t.Fatalf("session %d still works after the password change", i+1)
		}
	}
	if st, _ := b1.signIn(email, "correct horse battery"); st != http.StatusUnauthorized {
		t.Fatalf("old password: %d", st)
	}
	if st, _ := b1.signIn(email, "a brand new password"); st != http.StatusOK {
		t.Fatalf("new password: %d", st)
	}
}

// /dashboard/keys?revoked=X names a key only when X is the prefix of a
// revoked key of this account: the address cannot put words on the page.
func TestRevokedNoticeNamesOwnKeysOnly(t *testing.T) {
	e, d := start(t)
	b, acct, key := signedIn(t, e, d, 0)
	active := e.Key(acct, accounts.PayAsYouGo)
	if err := e.Parts.API.Accounts.RevokeKey(context.Background(), key[:16]); err != nil {
		t.Fatal(err)
	}
	otherAcct, otherKey := e.Account(0)
	_ = otherAcct
	if err := e.Parts.API.Accounts.RevokeKey(context.Background(), otherKey[:16]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		revoked string
		notice  bool
	}{
		{key[:16], true},
		{"Your account is suspended. Call +1 555 0100 now", false},
		{otherKey[:16], false},
		{active[:16], false},
		{"", false},
	} {
		st, body := b.get(dashboard.Base + "/keys?revoked=" + url.QueryEscape(c.revoked))
		if st != http.StatusOK {
			t.Fatalf("%q: %d", c.revoked, st)
		}
		if got := strings.Contains(body, `id="notice"`); got != c.notice {
			t.Errorf("revoked=%q: notice shown %v, want %v", c.revoked, got, c.notice)
		}
		if c.revoked != "" && !c.notice && strings.Contains(body, html.EscapeString(c.revoked)+" is revoked") {
			t.Errorf("revoked=%q is displayed", c.revoked)
		}
	}
}

func TestOneTimeLink(t *testing.T) {
	e, d := start(t)
	acct, _ := e.Account(0)
	ctx := context.Background()
	u, err := d.Users.Create(ctx, acct, "Link@Example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := d.Users.NewLink(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, e)
	// Without a password, the password form never signs in.
	if st, _ := b.signIn("link@example.com", ""); st != http.StatusUnauthorized {
		t.Fatalf("password sign-in of a link-only user: %d", st)
	}
	st, body := b.get(dashboard.Base + "/login/link?token=" + tok)
	if st != http.StatusOK || !strings.Contains(body, `id="login-link"`) || !strings.Contains(body, "link@example.com") {
		t.Fatalf("link page: %d\n%s", st, body)
	}
	// Fetching the page does not spend the link; the POST does.
	b.get(dashboard.Base + "/login/link?token=" + tok)
	st, body = b.post(dashboard.Base+"/login/link", url.Values{"token": {tok}})
	if st != http.StatusOK || !strings.Contains(body, `id="credit-balance"`) {
		t.Fatalf("link sign-in: %d\n%s", st, body)
	}
	other := newBrowser(t, e)
	if st, _ := other.post(dashboard.Base+"/login/link", url.Values{"token": {tok}}); st != http.StatusGone {
		t.Fatalf("second use: %d", st)
	}
	if st, _ := other.get(dashboard.Base + "/login/link?token=" + tok); st != http.StatusGone {
		t.Fatalf("used link page: %d", st)
	}
}

func TestCSRF(t *testing.T) {
	e, d := start(t)
	b, _, _ := signedIn(t, e, d, 0)
	_, page := b.get(dashboard.Base + "/keys")
	tok := csrf(t, page)

	// No token.
	if st, body := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}}); st != http.StatusForbidden || !strings.Contains(body, "Request refused") {
		t.Fatalf("without a token: %d\n%s", st, body)
	}
	// A wrong token.
	if st, _ := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {tok + "x"}}); st != http.StatusForbidden {
		t.Fatalf("wrong token: %d", st)
	}
	// The right token from another site.
	b.origin = "https://evil.example"
	if st, _ := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {tok}}); st != http.StatusForbidden {
		t.Fatalf("wrong origin: %d", st)
	}
	// Neither Origin nor Referer.
	b.origin = ""
	if st, _ := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {tok}}); st != http.StatusForbidden {
		t.Fatalf("no origin: %d", st)
	}
	// Sign-in from another site is refused too (login CSRF).
	nb := newBrowser(t, e)
	nb.origin = "https://evil.example"
	if st, _ := nb.signIn("x@example.com", "whatever1"); st != http.StatusForbidden {
		t.Fatalf("cross-site sign-in: %d", st)
	}
	b.origin = e.URL
	if st, body := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {tok}}); st != http.StatusOK || !strings.Contains(body, `id="new-key-value"`) {
		t.Fatalf("with token and origin: %d\n%s", st, body)
	}
}

func TestSignOutRevokes(t *testing.T) {
	e, d := start(t)
	b, _, _ := signedIn(t, e, d, 0)
	old := b.cookie()
	_, page := b.get(dashboard.Base + "/")
	if st, body := b.post(dashboard.Base+"/logout", url.Values{"csrf_token": {csrf(t, page)}}); st != http.StatusOK || !strings.Contains(body, `id="login"`) {
		t.Fatalf("sign out: %d\n%s", st, body)
	}
	// The old cookie replayed by someone who copied it: no session.
	req, _ := http.NewRequest(http.MethodGet, e.URL+dashboard.Base+"/keys", nil)
	req.AddCookie(&http.Cookie{Name: dashboard.CookieName, Value: old})
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), dashboard.Base+"/login") {
		t.Fatalf("old cookie after sign-out: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
}

func TestRevokeSessions(t *testing.T) {
	e, d := start(t)
	acct, email, _ := user(t, e, d, 0)
	_ = acct
	b1, b2 := newBrowser(t, e), newBrowser(t, e)
	b1.signIn(email, "correct horse battery")
	b2.signIn(email, "correct horse battery")
	u, _, err := d.Users.ByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.Users.RevokeSessions(context.Background(), u.ID); err != nil || n != 2 {
		t.Fatalf("revoked %d, %v", n, err)
	}
	for _, b := range []*browser{b1, b2} {
		if _, body := b.get(dashboard.Base + "/"); !strings.Contains(body, `id="login"`) {
			t.Fatal("a revoked session still works")
		}
	}
}

func TestSessionIsNotAPIAuth(t *testing.T) {
	e, d := start(t)
	b, _, _ := signedIn(t, e, d, 100*credits.Scale)
	// The cookie jar would send the cookie if its path matched; send it
	// explicitly to /v1 as a browser with a broader cookie would.
	for _, path := range []string{"/v1/credits", "/v1/unlimited/usage"} {
		req, _ := http.NewRequest(http.MethodGet, e.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: dashboard.CookieName, Value: b.cookie()})
		st, body := b.do(req)
		if st != http.StatusUnauthorized || !strings.Contains(body, "X-API-Key") {
			t.Fatalf("%s with a session cookie: %d %s", path, st, body)
		}
	}
	// The dashboard's JSON takes only the session.
	if st, _ := newBrowser(t, e).get(dashboard.Base + "/api/jobs"); st != http.StatusUnauthorized {
		t.Fatalf("dashboard JSON without a session: %d", st)
	}
}

var newKeyRE = regexp.MustCompile(`id="new-key-value"[^>]*>([^<]+)<`)

func TestKeyLifecycle(t *testing.T) {
	e, d := start(t)
	b, acct, _ := signedIn(t, e, d, 42*credits.Scale)
	_, page := b.get(dashboard.Base + "/keys")
	st, body := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {csrf(t, page)}})
	m := newKeyRE.FindStringSubmatch(body)
	if st != http.StatusOK || m == nil {
		t.Fatalf("create key: %d\n%s", st, body)
	}
	key := m[1]
	r := e.Get("/v1/credits", key)
	var cr struct {
		Credits float64 `json:"credits"`
		UserID  string  `json:"user_id"`
	}
	r.Decode(t, &cr)
	if r.Status != http.StatusOK || cr.UserID != acct || cr.Credits != 42 {
		t.Fatalf("credits with the new key: %d %s", r.Status, r.Body)
	}
	// Shown once: the list has its prefix and last use, never the value.
	prefix := key[:16]
	_, list := b.get(dashboard.Base + "/keys")
	if strings.Contains(list, key) || !strings.Contains(list, `data-key-prefix="`+prefix+`"`) {
		t.Fatalf("keys page after creation:\n%s", list)
	}
	if !regexp.MustCompile(`data-key-prefix="` + prefix + `"[\s\S]*?<td>\d{4}-\d\d-\d\d \d\d:\d\d UTC</td>\s*<td><span class="badge badge-ok">`).MatchString(list) {
		t.Errorf("last used not shown:\n%s", list)
	}
	// Revoke: a confirmation page, then the POST.
	id := key[4:16]
	st, confirm := b.get(dashboard.Base + "/keys/" + id + "/revoke")
	if st != http.StatusOK || !strings.Contains(confirm, `id="revoke-key"`) {
		t.Fatalf("revoke confirmation: %d\n%s", st, confirm)
	}
	if r := e.Get("/v1/credits", key); r.Status != http.StatusOK {
		t.Fatalf("before revocation: %d", r.Status)
	}
	st, body = b.post(dashboard.Base+"/keys/"+id+"/revoke", url.Values{"csrf_token": {csrf(t, confirm)}})
	if st != http.StatusOK || !strings.Contains(body, "is revoked") {
		t.Fatalf("revoke: %d\n%s", st, body)
	}
	if r := e.Get("/v1/credits", key); r.Status != http.StatusUnauthorized {
		t.Fatalf("after revocation: %d %s", r.Status, r.Body)
	}
	// Another account's key cannot be revoked from here.
	_, otherKey := e.Account(0)
	if st, _ := b.get(dashboard.Base + "/keys/" + otherKey[4:16] + "/revoke"); st != http.StatusNotFound {
		t.Fatalf("another account's key: %d", st)
	}
}

var draftRE = regexp.MustCompile(`action="/dashboard/jobs/new/([A-Za-z0-9_-]+)"`)

// newJob runs the upload and mapping steps and returns the confirm page
// and the draft id.
func newJob(t *testing.T, b *browser, family, pay, fileName, csvText string) (string, string) {
	t.Helper()
	_, page := b.get(dashboard.Base + "/jobs/new")
	st, body := b.postMultipart(dashboard.Base+"/jobs/new", map[string]string{"csrf_token": csrf(t, page), "family": family, "pay": pay}, fileName, csvText)
	m := draftRE.FindStringSubmatch(body)
	if st != http.StatusOK || m == nil || !strings.Contains(body, `id="map-columns"`) {
		t.Fatalf("upload: %d\n%s", st, body)
	}
	draft := m[1]
	// Submit the guessed mapping as the page shows it.
	form := url.Values{"csrf_token": {csrf(t, body)}}
	if strings.Contains(body, `id="has-header" name="has_header" value="1" checked`) {
		form.Set("has_header", "1")
	}
	sel := regexp.MustCompile(`<select id="map-([a-z_]+)" name="map_[a-z_]+">([\s\S]*?)</select>`)
	opt := regexp.MustCompile(`<option value="(\d*)" selected>`)
	for _, s := range sel.FindAllStringSubmatch(body, -1) {
		if o := opt.FindStringSubmatch(s[2]); o != nil {
			form.Set("map_"+s[1], o[1])
		}
	}
	st, body = b.post(dashboard.Base+"/jobs/new/"+draft, form)
	if st != http.StatusOK || !strings.Contains(body, `id="confirm-job"`) {
		t.Fatalf("review: %d\n%s", st, body)
	}
	return body, draft
}

func (b *browser) confirm(draft, page string) (int, string) {
	b.t.Helper()
	return b.post(dashboard.Base+"/jobs/new/"+draft+"/confirm", url.Values{"csrf_token": {csrf(b.t, page)}})
}

var jobIDRE = regexp.MustCompile(`id="job-id">([0-9a-f-]{36})<`)

// TestNewJobChargesLikeTheAPI submits the same list through the dashboard
// and through the API (on an account with the same balance) for every
// family: the same charge.
func TestNewJobChargesLikeTheAPI(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	cases := []struct {
		family, file, csv string
		path              string
		body              any
		cost              string
		preview           string // a row of the confirm page's "what will be sent"
	}{
		{"company_enrichment", "companies.csv",
			"Company LinkedIn,Website\nhttps://www.linkedin.com/company/northwind-traders,\nlinkedin.com/company/northwind-traders/about/,\n,fabrikam.example\n,not a domain\n",
			"/v1/company-enrichment/bulk", map[string]any{"input": []map[string]string{
				{"network_url": "https://www.linkedin.com/company/northwind-traders"},
				{"network_url": "linkedin.com/company/northwind-traders/about/"},
				{"domain": "fabrikam.example"}, {"domain": "not a domain"}}}, "2 credits",
			"<tr><td></td><td>fabrikam.example</td></tr>"},
		{"email_lookup", "people.csv",
			"first_name,last_name,domain\nJane,Doe,initech.test\n jane,DOE,INITECH.test\nJohn,Smith,initech.test\n",
			"/v1/bulk-lookup", map[string]any{"input": []map[string]string{
				{"first_name": "Jane", "last_name": "Doe", "domain": "initech.test"},
				{"first_name": "jane", "last_name": "DOE", "domain": "INITECH.test"},
				{"first_name": "John", "last_name": "Smith", "domain": "initech.test"}}}, "2 credits",
			"<tr><td>jane</td><td>DOE</td><td>INITECH.test</td></tr>"},
		{"email_verification", "emails.txt",
			"alice@acme.test\nALICE@acme.test\nbob@acme.test\nnot-an-email\n",
			"/v1/bulk", map[string]any{"emails": []string{"alice@acme.test", "ALICE@acme.test", "bob@acme.test", "not-an-email"}}, "0.6 credits",
			`<th scope="col">email</th></tr></thead>
    <tbody><tr><td>alice@acme.test</td></tr>`},
	}
	for _, c := range cases {
		t.Run(c.family, func(t *testing.T) {
			b, acct, _ := signedIn(t, e, d, 100*credits.Scale)
			apiAcct, apiKey := e.Account(100 * credits.Scale)
			page, draft := newJob(t, b, c.family, "credits", c.file, c.csv)
			if !strings.Contains(page, `data-testid="quote-cost">`+c.cost+`</strong>`) {
				t.Fatalf("confirm page does not show %s:\n%s", c.cost, page)
			}
			if !strings.Contains(page, c.preview) {
				t.Fatalf("confirm page does not show the row %s as sent:\n%s", c.preview, page)
			}
			if got := e.Balance(acct); got != 100*credits.Scale {
				t.Fatalf("charged before confirming: %s", got)
			}
			st, body := b.confirm(draft, page)
			m := jobIDRE.FindStringSubmatch(body)
			if st != http.StatusOK || m == nil {
				t.Fatalf("confirm: %d\n%s", st, body)
			}
			// Verification results wait for the job (the API's 409, shown).
			if c.family == "email_verification" && (!strings.Contains(body, `id="results-pending"`) || strings.Contains(body, `id="download-csv"`)) {
				t.Fatalf("verification job page while running:\n%s", body)
			}
			r := e.PostJSON(c.path, apiKey, c.body)
			if r.Status != http.StatusOK {
				t.Fatalf("API: %d %s", r.Status, r.Body)
			}
			dashSpent, apiSpent := 100*credits.Scale-e.Balance(acct), 100*credits.Scale-e.Balance(apiAcct)
			if dashSpent != apiSpent || dashSpent == 0 {
				t.Fatalf("dashboard charged %s, the API %s", dashSpent, apiSpent)
			}
			// A second confirm of the same upload does not charge again.
			if st, _ := b.confirm(draft, page); st != http.StatusOK || e.Balance(acct) != 100*credits.Scale-dashSpent {
				t.Fatalf("second confirm: %d, balance %s", st, e.Balance(acct))
			}
			// The ledger says it came from the dashboard.
			es, err := e.Parts.API.Billing.Entries(context.Background(), acct, "", 10)
			if err != nil {
				t.Fatal(err)
			}
			last := es[len(es)-1]
			if last.Kind != billing.KindCharge || last.KeyID != dashboard.DashboardKeyID || last.JobID != m[1] {
				t.Fatalf("ledger: %+v", last)
			}
			_, ledger := b.get(dashboard.Base + "/ledger")
			if !strings.Contains(ledger, `id="ledger"`) || !strings.Contains(ledger, m[1][:8]) {
				t.Fatalf("ledger page:\n%s", ledger)
			}
			// The jobs page and its JSON list it; API keys cannot see it.
			_, jobsPage := b.get(dashboard.Base + "/jobs")
			if !strings.Contains(jobsPage, `data-job-id="`+m[1]+`"`) {
				t.Fatalf("jobs page lacks the job:\n%s", jobsPage)
			}
			if r := e.Get(c.path+"/"+m[1], apiKey); r.Status != http.StatusNotFound {
				t.Fatalf("an API key reads the dashboard's job: %d", r.Status)
			}
		})
	}
}

// apiDetail is the detail of an API error answer.
func apiDetail(t *testing.T, r bulkdtest.Response) string {
	t.Helper()
	var e struct {
		Detail string `json:"detail"`
	}
	r.Decode(t, &e)
	return e.Detail
}

func TestNewJobInsufficientCredits(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, key := signedIn(t, e, d, 2*credits.Scale)
	page, draft := newJob(t, b, "company_enrichment", "credits", "c.csv", "domain\na.example\nb.example\nc.example\n")
	if !strings.Contains(page, `id="quote-short"`) {
		t.Fatalf("confirm page does not warn:\n%s", page)
	}
	st, body := b.confirm(draft, page)
	r := e.PostJSON("/v1/company-enrichment/bulk", key, map[string]any{"input": []map[string]string{
		{"domain": "a.example"}, {"domain": "b.example"}, {"domain": "c.example"}}})
	if r.Status != http.StatusForbidden || st != http.StatusForbidden {
		t.Fatalf("API %d, dashboard %d", r.Status, st)
	}
	if detail := apiDetail(t, r); !strings.Contains(body, html.EscapeString(detail)) {
		t.Fatalf("dashboard does not show the API's %q:\n%s", detail, body)
	}
	if got := e.Balance(acct); got != 2*credits.Scale {
		t.Fatalf("balance %s", got)
	}
}

func TestNewJobOverQuota(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 0)
	ctx := context.Background()
	if err := e.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ukey := e.Key(acct, accounts.Unlimited)
	limit := e.Parts.API.Plans[accounts.PlanStarter].DailyBulkSearches
	// Use all but one search of today's quota.
	if _, err := e.Parts.API.Billing.Consume(ctx, billing.Consumption{AccountID: acct, KeyID: "test", ChargeID: "pre",
		Window: billing.DailyWindow(billing.BulkSearches, e.Clock.Now()), N: limit - 1, Limit: limit}); err != nil {
		t.Fatal(err)
	}
	page, draft := newJob(t, b, "email_lookup", "quota", "p.csv", "First Name,Surname,Company Domain\nJane,Doe,initech.test\nJohn,Smith,initech.test\n")
	if !strings.Contains(page, `data-testid="quote-cost">2 bulk searches</strong>`) || !strings.Contains(page, `id="quote-short"`) {
		t.Fatalf("confirm page:\n%s", page)
	}
	st, body := b.confirm(draft, page)
	r := e.PostJSON("/v1/unlimited/bulk-lookup", ukey, map[string]any{"input": []map[string]string{
		{"first_name": "Jane", "last_name": "Doe", "domain": "initech.test"}, {"first_name": "John", "last_name": "Smith", "domain": "initech.test"}}})
	if r.Status != http.StatusTooManyRequests || st != http.StatusTooManyRequests {
		t.Fatalf("API %d, dashboard %d", r.Status, st)
	}
	if detail := apiDetail(t, r); !strings.Contains(body, html.EscapeString(detail)) {
		t.Fatalf("dashboard does not show the API's %q:\n%s", detail, body)
	}
	// Within the quota it is accepted and counted like the API's.
	page, draft = newJob(t, b, "email_lookup", "quota", "p.csv", "first_name,last_name,domain\nJane,Doe,initech.test\n")
	if st, body := b.confirm(draft, page); st != http.StatusOK || !jobIDRE.MatchString(body) {
		t.Fatalf("within quota: %d\n%s", st, body)
	}
	used, _ := e.Parts.API.Billing.Used(ctx, acct, billing.DailyWindow(billing.BulkSearches, e.Clock.Now()))
	if used != limit {
		t.Fatalf("used %d of %d", used, limit)
	}
	// One quota (SPEC 8, quota rule 3): what the dashboard used, the API
	// cannot.
	r = e.PostJSON("/v1/unlimited/bulk-lookup", ukey, map[string]any{"input": []map[string]string{
		{"first_name": "Ann", "last_name": "Lee", "domain": "initech.test"}}})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), "bulk_searches_limited") {
		t.Fatalf("API after the dashboard used the quota: %d %s", r.Status, r.Body)
	}
	// A lapsed plan: the API's 402.
	if err := e.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateLapsed, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, up := b.get(dashboard.Base + "/jobs/new")
	st, body = b.postMultipart(dashboard.Base+"/jobs/new", map[string]string{"csrf_token": csrf(t, up), "family": "email_lookup", "pay": "quota",
		"paste": "Jane,Doe,initech.test"}, "", "")
	if m := draftRE.FindStringSubmatch(body); st == http.StatusOK && m != nil {
		st, body = b.post(dashboard.Base+"/jobs/new/"+m[1], url.Values{"csrf_token": {csrf(t, body)}, "map_first_name": {"0"}, "map_last_name": {"1"}, "map_domain": {"2"}})
	}
	if st != http.StatusPaymentRequired || !strings.Contains(body, "unlimited plan of this account is not active") {
		t.Fatalf("lapsed plan: %d\n%s", st, body)
	}
}

func TestJobPageAndCSV(t *testing.T) {
	e, d := start(t)
	e.PutCompanies(bulkdtestCompanies()...)
	b, acct, key := signedIn(t, e, d, 100*credits.Scale)
	r := e.PostJSON("/v1/company-enrichment/bulk", key, map[string]any{"input": []map[string]string{
		{"network_url": "https://www.linkedin.com/company/northwind-traders"}, {"domain": "nope.example"},
		{"domain": "=cmd|' /C calc'!A0"}, {"network_url": "linkedin.com/company/northwind-traders"}}})
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	e.WaitFor("/v1/company-enrichment/bulk/"+sub.JobID, key, 20*time.Second)

	st, page := b.get(dashboard.Base + "/jobs/" + sub.JobID)
	for _, want := range []string{`id="job-status" data-testid="job-status">completed<`, `id="download-csv"`, `id="job-chart"`, `id="results"`, "Northwind", `id="job-progress" max="100" value="100"`} {
		if !strings.Contains(page, want) {
			t.Errorf("job page lacks %s", want)
		}
	}
	if st != http.StatusOK {
		t.Fatalf("job page %d\n%s", st, page)
	}
	st, got := b.get(dashboard.Base + "/jobs/" + sub.JobID + "/results.csv")
	want := e.Get("/v1/company-enrichment/bulk/"+sub.JobID+"/results?format=csv", key)
	if st != http.StatusOK || want.Status != http.StatusOK || got != string(want.Body) || len(got) < 50 {
		t.Fatalf("dashboard CSV (%d):\n%s\nAPI CSV (%d):\n%s", st, got, want.Status, want.Body)
	}
	if ct := b.last.Header.Get("Content-Type"); ct != want.Header.Get("Content-Type") || b.last.Header.Get("Content-Disposition") != want.Header.Get("Content-Disposition") {
		t.Fatalf("headers: %q %q", ct, b.last.Header.Get("Content-Disposition"))
	}
	// The JSON the page polls.
	st, js := b.get(dashboard.Base + "/api/jobs/" + sub.JobID)
	var jv map[string]any
	if err := json.Unmarshal([]byte(js), &jv); err != nil || st != http.StatusOK || jv["status"] != "completed" || jv["percent"] != float64(100) {
		t.Fatalf("job JSON %d %s", st, js)
	}
	// Another account's user sees none of it.
	other, _, _ := signedIn(t, e, d, 0)
	for _, p := range []string{"/jobs/" + sub.JobID, "/jobs/" + sub.JobID + "/results.csv", "/api/jobs/" + sub.JobID} {
		if st, _ := other.get(dashboard.Base + p); st != http.StatusNotFound {
			t.Fatalf("%s from another account: %d", p, st)
		}
	}
	_ = acct
}

func bulkdtestCompanies() []company.Record {
	str := func(s string) *string { return &s }
	return []company.Record{{NetworkURL: str("https://www.linkedin.com/company/northwind-traders"), Name: str("Northwind Traders"),
		Website: str("https://northwind.example"), Domain: str("northwind.example")}}
}

// TestPageWeight: every page with its stylesheet and script stays under
// 200 KB.
func TestPageWeight(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, _, key := signedIn(t, e, d, 100*credits.Scale)
	r := e.PostJSON("/v1/company-enrichment/bulk", key, map[string]any{"input": []map[string]string{{"domain": "a.example"}}})
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	_, css := b.get(dashboard.Base + "/static/app.css")
	_, js := b.get(dashboard.Base + "/static/app.js")
	if len(css) < 1000 || len(js) < 500 {
		t.Fatalf("assets: css %d js %d bytes", len(css), len(js))
	}
	page, draft := newJob(t, b, "company_enrichment", "credits", "c.csv", "domain\na.example\n")
	pages := map[string]string{"confirm": page}
	for _, p := range []string{"/", "/keys", "/jobs", "/jobs/new", "/jobs/new/" + draft, "/jobs/" + sub.JobID, "/ledger"} {
		st, body := b.get(dashboard.Base + p)
		if st != http.StatusOK {
			t.Fatalf("%s: %d", p, st)
		}
		pages[p] = body
	}
	for _, p := range []string{"/login"} {
		_, body := newBrowser(t, e).get(dashboard.Base + p)
		pages[p] = body
	}
	for p, body := range pages {
		total := len(body) + len(css) + len(js)
		t.Logf("%-40s %6d bytes (with assets %d)", p, len(body), total)
		if total >= 200_000 {
			t.Errorf("%s weighs %d bytes", p, total)
		}
		if strings.Contains(body, "http://") && !strings.Contains(body, e.URL) && strings.Contains(body, "<link") && strings.Contains(body, "https://") {
			t.Errorf("%s references another site", p)
		}
	}
}

func TestPasswordHash(t *testing.T) {
	h, err := users.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || !users.VerifyPassword(h, "correct horse battery") || users.VerifyPassword(h, "correct horse batterY") {
		t.Fatalf("hash %s", h)
	}
	if _, err := users.HashPassword("short"); err == nil {
		t.Fatal("a 5-character password was taken")
	}
}

func TestConfiguredOrigin(t *testing.T) {
	e, d := start(t, bulkdtest.WithConfig(func(c *config.Config) { c.DashboardOrigin = "https://bulkd.example.com" }))
	_, email, _ := user(t, e, d, 0)
	b := newBrowser(t, e)
	if st, _ := b.signIn(email, "correct horse battery"); st != http.StatusForbidden {
		t.Fatalf("the request's own host, not the configured origin: %d", st)
	}
	b.origin = "https://bulkd.example.com"
	if st, body := b.signIn(email, "correct horse battery"); st != http.StatusOK || !strings.Contains(body, `id="credit-balance"`) {
		t.Fatalf("configured origin: %d", st)
	}
}

func TestLedgerPages(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 0)
	ctx := context.Background()
	for i := 1; i <= 60; i++ {
		if _, err := e.Parts.API.Billing.Adjust(ctx, acct, credits.Amount(i)*credits.Scale, fmt.Sprintf("grant %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, first := b.get(dashboard.Base + "/ledger")
	if strings.Count(first, "data-entry-id=") != 50 || !strings.Contains(first, "grant 60") || strings.Contains(first, "grant 10<") {
		t.Fatalf("first page:\n%s", first)
	}
	m := regexp.MustCompile(`id="ledger-older" href="/dashboard/ledger\?before=([0-9-]+)"`).FindStringSubmatch(first)
	if m == nil {
		t.Fatal("no link to older entries")
	}
	_, second := b.get(dashboard.Base + "/ledger?before=" + m[1])
	if strings.Count(second, "data-entry-id=") != 10 || !strings.Contains(second, "grant 1<") || strings.Contains(second, `id="ledger-older"`) {
		t.Fatalf("second page:\n%s", second)
	}
	if st, _ := b.get(dashboard.Base + "/ledger?before=junk"); st != http.StatusOK {
		t.Fatalf("a malformed cursor: %d", st)
	}
}

// Issue 26, item 4, as an attacker runs it: one IPv6 subscriber (a /64)
// rotating its addresses is one client to the throttle; a botnet of many
// addresses trying one email is held back by the email's own limit; and
// the owner, from the network it signed in from before, is never locked
// out by either.
func TestSignInThrottleIPv6AndPerUser(t *testing.T) {
	e, d := start(t, bulkdtest.WithConfig(func(c *config.Config) { c.TrustedProxies = "127.0.0.1" }))
	_, email, _ := user(t, e, d, 0)

	// The owner signs in once from home (2001:db8:aa::/64).
	owner := newBrowser(t, e)
	owner.forwardedFor = "2001:db8:aa::10"
	if st, _ := owner.signIn(email, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("owner: %d", st)
	}

	// 60 attempts from 60 addresses of one /64: 5 free, then held back.
	b := newBrowser(t, e)
	refused := 0
	for i := range 60 {
		b.forwardedFor = fmt.Sprintf("2001:db8:bad:1::%x", i+1)
		if st, _ := b.signIn(email, "wrong password"); st == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != 55 {
		t.Fatalf("60 attempts from one /64: %d refused, want 55 (5 free)", refused)
	}

	// A botnet: one attempt from each of many networks. The email's
	// limit (20 in any 10 min, the /64's 5 above included) holds it back.
	answered := 5
	for i := range 40 {
		b.forwardedFor = fmt.Sprintf("198.51.%d.%d", 100+i/200, i%200+1)
		if st, _ := b.signIn(email, "wrong password"); st == http.StatusUnauthorized {
			answered++
		} else if st != http.StatusTooManyRequests {
			t.Fatalf("botnet attempt %d: %d", i, st)
		}
	}
	if answered != 20 {
		t.Fatalf("%d password checks for one email across clients, want 20", answered)
	}
	// A new client, even with the right password, waits (at most the
	// window: 10 min) ...
	stranger := newBrowser(t, e)
	stranger.forwardedFor = "203.0.113.200"
	if st, _ := stranger.signIn(email, "correct horse battery"); st != http.StatusTooManyRequests {
		t.Fatalf("new client while the email is held back: %d", st)
	}
	if ra, _ := strconv.Atoi(stranger.last.Header.Get("Retry-After")); ra < 1 || ra > 600 {
		t.Fatalf("Retry-After %d", ra)
	}
	// ... but the owner, from another address of home's /64, is not held back.
	owner2 := newBrowser(t, e)
	owner2.forwardedFor = "2001:db8:aa::99"
	if st, _ := owner2.signIn(email, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("the owner from its known network: %d", st)
	}
	// The window slides: 10 minutes after the last of them the email is
	// open again to a new client.
	e.Clock.Set(e.Clock.Now().Add(10*time.Minute + time.Second))
	if st, _ := stranger.signIn(email, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("new client after the window: %d", st)
	}
}
