package apiserver_test

// The per-account bound on stored Idempotency-Key answers (issue 26, item
// 3; internal/idempotency, account.go), on a real Redis.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/idempotency"
)

func withIdemLimit(max int64) option {
	return func(d *apiserver.Deps) { d.Idempotency.MaxAccountBytes = max }
}

// idemUsage is what the account's stored answers are counted for.
func idemUsage(t *testing.T, api *testAPI, acct string) (bytes, records int64) {
	t.Helper()
	st := idempotency.New(api.Redis, idempotency.Options{}, api.Clock.Now)
	b, n, err := st.Usage(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	return b, n
}

// TestIdempotencyRecordsFloodCapped is issue 26's flood with answers
// worth storing: one API key sends charged lookups, each with a new
// Idempotency-Key. The account's stored answers stop at its limit: the
// next new key is 429 idempotency_records_limited with Retry-After until
// the oldest expires, nothing run or charged; a stored key is still
// replayed; the same request without a key runs; another account is not
// affected; once the answers expire (24 h by the API's clock) the account
// may store again, and Redis expires the records themselves.
func TestIdempotencyRecordsFloodCapped(t *testing.T) {
	const limit = 8 << 10
	api := newTestAPI(t, withLookup(1000), withIdemLimit(limit))
	acct, key := api.account(credits.Whole(1000), accounts.PayAsYouGo)
	start := api.balance(acct)

	stored, refused := 0, 0
	var price credits.Amount
	var first429 response
	for i := range 200 {
		before := api.balance(acct)
		r := api.postIdem("/v1/email-lookup", lookupFound, key, fmt.Sprintf("flood-%d", i))
		switch r.Status {
		case http.StatusOK:
			if refused > 0 {
				t.Fatalf("request %d stored after a refusal", i)
			}
			stored++
			price = before - api.balance(acct)
		case http.StatusTooManyRequests:
			if refused == 0 {
				first429 = r
			}
			refused++
			if api.balance(acct) != before {
				t.Fatalf("a refused request charged: %s -> %s", before, api.balance(acct))
			}
		default:
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
		api.Clock.Set(api.Clock.Now().Add(time.Second))
	}
	b, n := idemUsage(t, api, acct)
	t.Logf("limit %d bytes: %d answers stored (%d bytes counted), %d refused; price %s each", limit, stored, b, refused, price)
	if stored == 0 || refused == 0 || int64(stored) != n {
		t.Fatalf("%d stored, %d refused, %d counted", stored, refused, n)
	}
	// Sequential requests: the limit holds to within one answer.
	if b < limit || b >= limit+b/n {
		t.Fatalf("counted %d bytes; want from the limit %d to one answer more", b, limit)
	}
	if got, want := api.balance(acct), start-credits.Amount(stored)*price; got != want {
		t.Fatalf("balance %s, want %s (only the stored answers charged)", got, want)
	}
	e := first429.JSON(t)
	ra, _ := strconv.Atoi(first429.Header.Get("Retry-After"))
	if e["code"] != "idempotency_records_limited" || !strings.Contains(e["detail"].(string), "Idempotency-Key") ||
		ra < 86000 || ra > 86400 || first429.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("429: Retry-After %q %v", first429.Header.Get("Retry-After"), e)
	}
	// What stays possible at the limit.
	if r := api.postIdem("/v1/email-lookup", lookupFound, key, "flood-0"); r.Status != 200 || !replayed(r) {
		t.Fatalf("stored key at the limit: %d replayed=%v", r.Status, replayed(r))
	}
	if r := api.do(http.MethodPost, "/v1/email-lookup", lookupFound, "X-API-Key", key); r.Status != 200 {
		t.Fatalf("no key at the limit: %d %s", r.Status, r.Body)
	}
	acct2, key2 := api.account(credits.Whole(10), accounts.PayAsYouGo)
	if r := api.postIdem("/v1/email-lookup", lookupFound, key2, "flood-0"); r.Status != 200 || replayed(r) {
		t.Fatalf("another account: %d %s", r.Status, r.Body)
	}
	if _, n2 := idemUsage(t, api, acct2); n2 != 1 {
		t.Fatalf("another account counts %d answers", n2)
	}
	// The records expire in Redis with their answers' 24 h, and so does
	// the account's count of them.
	ks, err := api.Redis.Keys(context.Background(), "bulkd:idem:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(ks, "bulkd:acct:{"+acct+"}:idem", "bulkd:acct:{"+acct+"}:idem:size") {
		if d := api.Redis.PTTL(context.Background(), k).Val(); d <= 0 || d > 25*time.Hour {
			t.Fatalf("%s expires in %v", k, d)
		}
	}
	if len(ks) != stored+1 {
		t.Fatalf("%d records in Redis, want %d", len(ks), stored+1)
	}
	// A day later (the API's clock) the oldest have expired: room again.
	api.Clock.Set(api.Clock.Now().Add(24 * time.Hour))
	if r := api.postIdem("/v1/email-lookup", lookupFound, key, "after-a-day"); r.Status != 200 || replayed(r) {
		t.Fatalf("a day later: %d %s", r.Status, r.Body)
	}
	if b, n := idemUsage(t, api, acct); n != 1 || b >= limit {
		t.Fatalf("a day later the account counts %d answers, %d bytes", n, b)
	}
}

// Deleting a job (docs/privacy.md) deletes the Idempotency-Key record that
// replays its submission (issue 28), and the account no longer counts it.
func TestDeleteJobRemovesIdempotencyRecord(t *testing.T) {
	api := newTestAPI(t, withEngine(&idleExecutor{}), withIdemLimit(1<<20))
	acct, key := api.account(credits.Whole(100), accounts.PayAsYouGo)
	const path = "/v1/company-enrichment/bulk"
	r := api.postIdem(path, idemCompanyBody, key, "to-delete")
	if r.Status != 200 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id, _ := r.JSON(t)["job_id"].(string)
	rk := idempotency.Key(accounts.KeyIDOf(key), "to-delete")
	if _, n := idemUsage(t, api, acct); n != 1 {
		t.Fatalf("%d answers counted after one submission", n)
	}
	if d := api.do(http.MethodDelete, path+"/"+id, "", "X-API-Key", key); d.Status != 200 {
		t.Fatalf("delete: %d %s", d.Status, d.Body)
	}
	ks, err := api.Redis.Keys(context.Background(), "bulkd:idem:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 0 {
		t.Fatalf("records left after the delete: %v (submission's %s)", ks, rk)
	}
	if b, n := idemUsage(t, api, acct); n != 0 || b != 0 {
		t.Fatalf("the deleted job's answer still counted: %d answers, %d bytes", n, b)
	}
	// The key now runs anew: a new job, charged again.
	if r2 := api.postIdem(path, idemCompanyBody, key, "to-delete"); r2.Status != 200 || replayed(r2) || r2.JSON(t)["job_id"] == id {
		t.Fatalf("the key after the delete: %d replayed=%v %s", r2.Status, replayed(r2), r2.Body)
	}
}

// One account's own limit on stored answers, set with `bulkd admin
// account limits --idempotency-bytes` (its default from
// BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES, as the servers'): it raises,
// lowers or (0) lifts the cap for that account only, the JSON view shows
// it with what the account holds, and "default" drops it.
func TestIdempotencyLimitOverride(t *testing.T) {
	const limit = 8 << 10
	api := newTestAPI(t, withLookup(1000), withIdemLimit(limit))
	acct, key := api.account(credits.Whole(1000), accounts.PayAsYouGo)
	acct2, key2 := api.account(credits.Whole(1000), accounts.PayAsYouGo)
	t.Setenv("BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES", strconv.Itoa(limit))
	limits := func(args ...string) admin.LimitView {
		t.Helper()
		var out, errb bytes.Buffer
		err := admin.Main(context.Background(), append([]string{"--redis-url", "redis://" + api.Redis.Options().Addr, "account", "limits"}, args...),
			admin.Env{Stdout: &out, Stderr: &errb, Now: api.Clock.Now})
		if err != nil {
			t.Fatalf("bulkd admin account limits %v: %v %s", args, err, errb.String())
		}
		var v admin.LimitsView
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `"idempotency_bytes"`) {
			t.Fatalf("the JSON view lacks idempotency_bytes: %s", out.String())
		}
		return v.IdempotencyBytes
	}
	n := 0
	// flood sends new keys until one is refused (at most 100); it returns
	// how many were stored and the refusal.
	flood := func(key string) (int, response) {
		t.Helper()
		for i := range 100 {
			n++
			r := api.postIdem("/v1/email-lookup", lookupFound, key, fmt.Sprint("k-", n))
			switch r.Status {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				return i, r
			default:
				t.Fatalf("request %d: %d %s", n, r.Status, r.Body)
			}
		}
		return 100, response{}
	}
	v := limits(acct, "--idempotency-bytes", "16KiB")
	if v.Limit != 16<<10 || v.Default != limit || v.Override == nil || *v.Override != 16<<10 || v.Used == nil || *v.Used != 0 {
		t.Fatalf("raised: %+v", v)
	}
	// Raised: the account stores about twice the default; the other
	// account keeps the default.
	got, r := flood(key)
	b, _ := idemUsage(t, api, acct)
	e := r.JSON(t)
	if r.Status != http.StatusTooManyRequests || e["code"] != "idempotency_records_limited" || r.Header.Get("Retry-After") == "" ||
		!strings.Contains(e["detail"].(string), "limit is 16384") || b < 16<<10 {
		t.Fatalf("raised: %d stored, %d bytes, then %d %s", got, b, r.Status, r.Body)
	}
	got2, r2 := flood(key2)
	b2, _ := idemUsage(t, api, acct2)
	if r2.Status != http.StatusTooManyRequests || !strings.Contains(r2.JSON(t)["detail"].(string), "limit is 8192") ||
		b2 < limit || b2 >= 16<<10 || got2 >= got {
		t.Fatalf("the other account: %d stored (%d bytes) against %d, then %d %s", got2, b2, got, r2.Status, r2.Body)
	}
	if v := limits(acct); v.Used == nil || *v.Used != b {
		t.Fatalf("used: %+v, want %d", v, b)
	}
	// Lowered below what it holds: refused at once.
	if v := limits(acct, "--idempotency-bytes", "4096"); v.Limit != 4096 || v.Override == nil || *v.Override != 4096 {
		t.Fatalf("lowered: %+v", v)
	}
	if got, r := flood(key); got != 0 || !strings.Contains(r.JSON(t)["detail"].(string), "limit is 4096") {
		t.Fatalf("lowered: %d stored, then %d %s", got, r.Status, r.Body)
	}
	// 0: no limit for this account; the other keeps its cap.
	if v := limits(acct, "--idempotency-bytes", "0"); v.Limit != 0 || v.Override == nil || *v.Override != 0 || v.Default != limit {
		t.Fatalf("no limit: %+v", v)
	}
	if got, _ := flood(key); got != 100 {
		t.Fatalf("no limit: refused after %d", got)
	}
	if got, _ := flood(key2); got != 0 {
		t.Fatalf("the other account under another's 0: %d stored", got)
	}
	// "default" drops the override: the default cap again.
	if v := limits(acct, "--idempotency-bytes", "default"); v.Limit != limit || v.Override != nil || v.Used == nil || *v.Used <= limit {
		t.Fatalf("default: %+v", v)
	}
	if got, r := flood(key); got != 0 || !strings.Contains(r.JSON(t)["detail"].(string), "limit is 8192") {
		t.Fatalf("default: %d stored, then %d %s", got, r.Status, r.Body)
	}
}
