//go:build e2ecluster

package cluster_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// (l) The dashboard behind the cluster's API Service: sign in, make a key
// on the keys page, use it on the API through the same Service, and find
// every page well under the weight budget.
func TestDashboardThroughTheService(t *testing.T) {
	acct, _ := account(t, credits.Whole(50))
	email := "owner-" + acct + "@example.com"
	if _, err := users.New(h.rdb, nil, users.Options{}).Create(context.Background(), acct, email, "correct horse battery staple"); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	do := func(method, path string, form url.Values) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, h.apiURL+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", h.apiURL)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	st, page := do(http.MethodGet, dashboard.Base+"/login", nil)
	if st != http.StatusOK || len(page) > 200<<10 {
		t.Fatalf("sign-in page: %d, %d bytes", st, len(page))
	}
	st, page = do(http.MethodPost, dashboard.Base+"/login", url.Values{"email": {email}, "password": {"correct horse battery staple"}})
	if st != http.StatusOK || !strings.Contains(page, `id="credit-balance"`) {
		t.Fatalf("sign in through the Service: %d\n%.2000s", st, page)
	}
	_, keys := do(http.MethodGet, dashboard.Base+"/keys", nil)
	m := csrfRE.FindStringSubmatch(keys)
	if m == nil {
		t.Fatalf("keys page without a form:\n%.2000s", keys)
	}
	st, page = do(http.MethodPost, dashboard.Base+"/keys", url.Values{"csrf_token": {m[1]}, "type": {"payg"}})
	k := regexp.MustCompile(`id="new-key-value"[^>]*>([^<]+)<`).FindStringSubmatch(page)
	if st != http.StatusOK || k == nil {
		t.Fatalf("create a key: %d\n%.2000s", st, page)
	}
	status, body := clusterAPI(t).Do(http.MethodGet, "/v1/credits", k[1], nil)
	if status != http.StatusOK || !strings.Contains(string(body), "50") {
		t.Fatalf("the dashboard's key on the API: %d %s", status, body)
	}
	// The session cookie is no API credential.
	req, _ := http.NewRequest(http.MethodGet, h.apiURL+"/v1/credits", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/credits with only the dashboard's cookie: %d", res.StatusCode)
	}
}
