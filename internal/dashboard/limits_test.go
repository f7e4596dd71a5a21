package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
)

// setLimit stores an account's own limit as `bulkd admin account limits`
// does: a field of the account's hash.
func setLimit(t *testing.T, e *bulkdtest.Env, acct, name string, v int64) {
	t.Helper()
	if err := e.Redis.HSet(context.Background(), "bulkd:acct:{"+acct+"}", "limit:"+name, v).Err(); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) upload(csvText string) (int, string) {
	b.t.Helper()
	_, page := b.get(dashboard.Base + "/jobs/new")
	return b.postMultipart(dashboard.Base+"/jobs/new", map[string]string{"csrf_token": csrf(b.t, page), "family": "email_verification", "pay": "credits"},
		"list.csv", csvText)
}

// Uploads waiting between their steps are limited per account, in number
// and in bytes; a refused upload is a 429 page naming the limit and
// stores nothing; a submitted upload stops counting. Before the fix every
// upload was kept for 2 hours, without limit.
func TestDraftLimits(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 100*credits.Scale)
	setLimit(t, e, acct, "drafts", 2)
	page1, draft1 := newJob(t, b, "email_verification", "credits", "a.csv", "email\na@example.com\n")
	if st, body := b.upload("email\nb@example.com\n"); st != http.StatusOK || !strings.Contains(body, `id="map-columns"`) {
		t.Fatalf("second upload: %d\n%s", st, body)
	}
	st, body := b.upload("email\nc@example.com\n")
	if st != http.StatusTooManyRequests || !strings.Contains(body, "drafts") || !strings.Contains(body, "limit is 2") ||
		b.last.Header.Get("Retry-After") == "" {
		t.Fatalf("third upload: %d %q\n%s", st, b.last.Header.Get("Retry-After"), body)
	}
	if n := len(keysOf(t, e, "bulkd:acct:{"+acct+"}:dashdraft:*")); n != 2 {
		t.Fatalf("%d drafts stored, want 2", n)
	}
	// Submitting one frees its place, and its upload is not kept twice.
	if st, _ := b.confirm(draft1, page1); st != http.StatusOK {
		t.Fatalf("confirm: %d", st)
	}
	if data, _ := e.Redis.HGet(context.Background(), "bulkd:acct:{"+acct+"}:dashdraft:"+draft1, "data").Result(); data != "" {
		t.Fatalf("a submitted upload still holds its data (%d bytes)", len(data))
	}
	if st, body := b.upload("email\nd@example.com\n"); st != http.StatusOK {
		t.Fatalf("upload after a submission: %d\n%s", st, body)
	}

	// Bytes: a 600-byte allowance takes one 400-byte upload, not two.
	b2, acct2, _ := signedIn(t, e, d, 0)
	setLimit(t, e, acct2, "draft_bytes", 600)
	list := "email\n" + strings.Repeat("someone@example.com\n", 20) // 406 bytes
	if st, body := b2.upload(list); st != http.StatusOK {
		t.Fatalf("first upload: %d\n%s", st, body)
	}
	st, body = b2.upload(list)
	if st != http.StatusTooManyRequests || !strings.Contains(body, "draft_bytes") {
		t.Fatalf("second upload: %d\n%s", st, body)
	}
}

// The measurement: three 16 MB uploads used to keep about 67 MB in
// Redis for 2 hours, for nothing. With the default limit (32 MiB of
// uploads per account) the third is refused and Redis keeps two.
func TestDraftBytesDefaultMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 48 MB")
	}
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 0)
	var sb strings.Builder
	sb.WriteString("email\n")
	// 168-byte rows: under the row limit (100,000) at 16 MB.
	pad := strings.Repeat("x", 60) + "." + strings.Repeat("x", 60) + "." + strings.Repeat("x", 19)
	for i := 0; sb.Len() < 16<<20-200; i++ {
		fmt.Fprintf(&sb, "person%07d@%s.example.com\n", i, pad)
	}
	list := sb.String()
	var codes []int
	for i := 0; i < 3; i++ {
		st, _ := b.upload(list)
		codes = append(codes, st)
	}
	var held int64
	for _, k := range keysOf(t, e, "bulkd:acct:{"+acct+"}:dashdraft*") {
		n, err := e.Redis.MemoryUsage(context.Background(), k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		held += n
	}
	t.Logf("three uploads of %d bytes: answers %v; Redis keeps %d bytes of drafts (MEMORY USAGE)", len(list), codes, held)
	if codes[0] != http.StatusOK || codes[1] != http.StatusOK || codes[2] != http.StatusTooManyRequests {
		t.Fatalf("answers %v, want 200 200 429", codes)
	}
	if held > 2*int64(len(list))+1<<20 {
		t.Fatalf("Redis keeps %d bytes of drafts", held)
	}
}

// The key limit in the dashboard: past it, creating a key is a 429 page
// naming the limit and makes nothing; a revocation frees a place.
func TestDashboardKeyLimit(t *testing.T) {
	e, d := start(t)
	b, acct, apiKey := signedIn(t, e, d, 0)
	setLimit(t, e, acct, "keys", 1) // the account already has its API key
	_, page := b.get(dashboard.Base + "/keys")
	st, body := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {csrf(t, page)}})
	if st != http.StatusTooManyRequests || !strings.Contains(body, "keys") || !strings.Contains(body, "limit is 1") ||
		newKeyRE.MatchString(body) {
		t.Fatalf("create over the limit: %d\n%s", st, body)
	}
	if n := len(keysOf(t, e, "bulkd:apikey:*")); n != 1 {
		t.Fatalf("%d key records, want 1", n)
	}
	st, confirm := b.get(dashboard.Base + "/keys/" + apiKey[4:16] + "/revoke")
	if st != http.StatusOK {
		t.Fatalf("revoke page: %d", st)
	}
	if st, _ := b.post(dashboard.Base+"/keys/"+apiKey[4:16]+"/revoke", url.Values{"csrf_token": {csrf(t, confirm)}}); st != http.StatusOK {
		t.Fatalf("revoke: %d", st)
	}
	_, page = b.get(dashboard.Base + "/keys")
	if st, body := b.post(dashboard.Base+"/keys", url.Values{"type": {"payg"}, "csrf_token": {csrf(t, page)}}); st != http.StatusOK || !newKeyRE.MatchString(body) {
		t.Fatalf("create after a revocation: %d\n%s", st, body)
	}
}

func keysOf(t *testing.T, e *bulkdtest.Env, pattern string) []string {
	t.Helper()
	ks, err := e.Redis.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}
