package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// These tests set an account's limits the way `bulkd admin account
// limits` stores them (a field of the account's hash) or through the
// command itself, and drive a whole standalone bulkd over HTTP.

func setLimit(t *testing.T, e *bulkdtest.Env, acct, name string, v int64) {
	t.Helper()
	if err := e.Redis.HSet(context.Background(), "bulkd:acct:{"+acct+"}", "limit:"+name, v).Err(); err != nil {
		t.Fatal(err)
	}
}

// post sends a JSON body with key and optional extra headers (name, value).
func post(t *testing.T, url, key string, body []byte, headers ...string) bulkdtest.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{Timeout: 60 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return bulkdtest.Response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func domainsBody(tag string, n int) []byte {
	var rows []string
	for i := 0; i < n; i++ {
		rows = append(rows, fmt.Sprintf(`{"domain":"%s-%d.example"}`, tag, i))
	}
	return []byte(`{"input":[` + strings.Join(rows, ",") + `]}`)
}

// checkOpenAPI validates an answer of the bulkd e against the OpenAPI
// document it serves.
func checkOpenAPI(t *testing.T, e *bulkdtest.Env, method, path, body string, r bulkdtest.Response) {
	t.Helper()
	api := &testAPI{t: t, URL: e.URL, client: &http.Client{Timeout: 10 * time.Second}}
	newOpenAPIChecker(t, api).check(method, e.URL+path, body, response{Status: r.Status, Header: r.Header, Body: r.Body})
}

type apiError struct {
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func ledgerOf(t *testing.T, e *bulkdtest.Env, acct string) []billing.Entry {
	t.Helper()
	es, err := e.Parts.API.Billing.Entries(context.Background(), acct, "", 10_000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// Concurrent submissions over the account's active-job limit, half of
// them with an Idempotency-Key: exactly the limit's worth are accepted;
// the others get 429 active_jobs_limited (detail naming the limit,
// Retry-After), and cost nothing: the balance is the accepted jobs'
// charges less, and the ledger holds those charges only. A refused
// request's Idempotency-Key runs anew once there is room, and a job that
// completes gives its place back. Before the fix all 12 were accepted.
func TestActiveJobLimitOverHTTP(t *testing.T) {
	e := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, key := e.Account(credits.Whole(1000))
	_, otherKey := e.Account(credits.Whole(1000))
	setLimit(t, e, acct, "active_jobs", 3)
	const n = 12
	var wg sync.WaitGroup
	res := make([]bulkdtest.Response, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var h []string
			if i%2 == 0 {
				h = []string{"Idempotency-Key", fmt.Sprintf("idem-%d", i)}
			}
			res[i] = post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody(fmt.Sprintf("c%d", i), 2), h...)
		}(i)
	}
	wg.Wait()
	ok, refusedIdem := 0, -1
	for i, r := range res {
		switch r.Status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			var ae apiError
			r.Decode(t, &ae)
			if ae.Code != "active_jobs_limited" || !strings.Contains(ae.Detail, "active_jobs") || !strings.Contains(ae.Detail, "limit is 3") ||
				r.Header.Get("Retry-After") != "30" {
				t.Fatalf("refusal %d: %s Retry-After %q", i, r.Body, r.Header.Get("Retry-After"))
			}
			if i%2 == 0 {
				refusedIdem = i
			}
			checkOpenAPI(t, e, http.MethodPost, "/v1/company-enrichment/bulk", string(domainsBody(fmt.Sprintf("c%d", i), 2)), r)
		default:
			t.Fatalf("submission %d: %d %s", i, r.Status, r.Body)
		}
	}
	if ok != 3 {
		t.Fatalf("%d submissions accepted, want exactly 3", ok)
	}
	if bal := e.Balance(acct); bal != credits.Whole(1000-3*2) {
		t.Fatalf("balance %v, want %v: a refused submission was charged", bal, credits.Whole(994))
	}
	es := ledgerOf(t, e, acct)
	if len(es) != 3 {
		t.Fatalf("ledger: %d entries, want the 3 charges: %+v", len(es), es)
	}
	for _, en := range es {
		if en.Kind != billing.KindCharge || en.Amount != "-2" {
			t.Fatalf("ledger entry %+v", en)
		}
	}
	// Another account is not affected.
	if r := post(t, e.URL+"/v1/company-enrichment/bulk", otherKey, domainsBody("o", 1)); r.Status != http.StatusOK {
		t.Fatalf("another account: %d %s", r.Status, r.Body)
	}
	// Jobs complete: their places come back, and a refused request's
	// Idempotency-Key was released (it runs anew, charged once).
	e.StartWorkers()
	bulkdtest.Eventually(t, 20*time.Second, 20*time.Millisecond, "the jobs to complete", func() bool {
		js, err := e.Parts.Engine.AccountJobs(context.Background(), acct, 10)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, j := range js {
			if j.Status == "completed" {
				done++
			}
		}
		return done == 3
	})
	if refusedIdem < 0 {
		t.Fatal("no refused request carried an Idempotency-Key")
	}
	r := post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody(fmt.Sprintf("c%d", refusedIdem), 2),
		"Idempotency-Key", fmt.Sprintf("idem-%d", refusedIdem))
	if r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry of a refused request with its key: %d %s", r.Status, r.Body)
	}
	if bal := e.Balance(acct); bal != credits.Whole(1000-4*2) {
		t.Fatalf("balance %v after the retry", bal)
	}
}

// The stored-bytes limit over HTTP: a submission that does not fit the
// account's data is 429 stored_bytes_limited with a Retry-After of when
// enough of it expires, and one larger than the whole limit says so;
// nothing charged either way.
func TestStoredBytesLimitOverHTTP(t *testing.T) {
	e := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, key := e.Account(credits.Whole(1000))
	if r := post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody("a", 20)); r.Status != http.StatusOK {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	// Room for a little more than one such job.
	setLimit(t, e, acct, "stored_bytes", 30_000)
	r := post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody("b", 20))
	var ae apiError
	r.Decode(t, &ae)
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || ae.Code != "stored_bytes_limited" || !strings.Contains(ae.Detail, "stored_bytes") ||
		ra < 29*86400 || ra > 30*86400 {
		t.Fatalf("over the limit: %d %s Retry-After %d", r.Status, r.Body, ra)
	}
	checkOpenAPI(t, e, http.MethodPost, "/v1/company-enrichment/bulk", string(domainsBody("b", 20)), r)
	r = post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody("huge", 60))
	r.Decode(t, &ae)
	if r.Status != http.StatusTooManyRequests || ae.Code != "stored_bytes_limited" || !strings.Contains(ae.Detail, "alone") {
		t.Fatalf("larger than the limit: %d %s", r.Status, r.Body)
	}
	if bal := e.Balance(acct); bal != credits.Whole(980) || len(ledgerOf(t, e, acct)) != 1 {
		t.Fatalf("balance %v, %d ledger entries: a refusal moved money", bal, len(ledgerOf(t, e, acct)))
	}
}

// The account's request-rate ceiling holds across all its keys: eight
// keys, each within its own 20 requests/s, sending at once, get about the
// account's 30 through (its burst), and the rest 429 rate_limited with a
// detail naming the account's limit; another account's key is not
// slowed. Before the fix each key had its own 20, and all 80 requests
// passed.
func TestAccountRateCeilingAcrossKeys(t *testing.T) {
	e := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, key := e.Account(0)
	_, otherKey := e.Account(0)
	setLimit(t, e, acct, "request_rate", 30)
	keys := []string{key}
	for len(keys) < 8 {
		keys = append(keys, e.Key(acct, accounts.PayAsYouGo))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var bad []string
	start := time.Now()
	for _, k := range keys {
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(k string) {
				defer wg.Done()
				r := e.Get("/v1/credits", k)
				mu.Lock()
				defer mu.Unlock()
				codes[r.Status]++
				if r.Status == http.StatusTooManyRequests {
					var ae apiError
					_ = json.Unmarshal(r.Body, &ae)
					if ae.Code != "rate_limited" || !strings.Contains(ae.Detail, "per account") || r.Header.Get("Retry-After") == "" {
						bad = append(bad, string(r.Body))
					}
				}
			}(k)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("8 keys x 10 requests at once: %v in %v", codes, elapsed)
	// The burst of 30, plus at most one more per 33 ms the volley took.
	most := 30 + int(elapsed/(33*time.Millisecond)) + 1
	if codes[http.StatusOK] < 30 || codes[http.StatusOK] > most || codes[http.StatusOK]+codes[http.StatusTooManyRequests] != 80 {
		t.Fatalf("answers %v in %v; want 30..%d accepted of 80", codes, elapsed, most)
	}
	if len(bad) > 0 {
		t.Fatalf("429 answers: %v", bad[0])
	}
	if r := e.Get("/v1/credits", otherKey); r.Status != http.StatusOK {
		t.Fatalf("another account: %d %s", r.Status, r.Body)
	}
	// A ceiling below one key's limit is raised to it: a key can always
	// use the rate its X-RateLimit-Limit announces.
	low, lowKey := e.Account(0)
	setLimit(t, e, low, "request_rate", 5)
	var okN int
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Get("/v1/credits", lowKey)
			mu.Lock()
			defer mu.Unlock()
			if r.Status == http.StatusOK {
				okN++
			}
		}()
	}
	wg.Wait()
	if okN != 20 {
		t.Fatalf("%d of one key's 20 requests passed under an account ceiling of 5", okN)
	}
}

// `bulkd admin account limits` changes one account's limit, the next
// request obeys it, and the account's other limits and other accounts
// keep the defaults; "default" drops the override.
func TestAdminAccountLimitsTakeEffect(t *testing.T) {
	e := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.AccountMaxActiveJobs = 5 }))
	acct, key := e.Account(credits.Whole(100))
	_, otherKey := e.Account(credits.Whole(100))
	redisURL := "redis://" + e.Redis.Options().Addr
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		err := admin.Main(context.Background(), append([]string{"--redis-url", redisURL, "--account-max-active-jobs", "5", "--account-max-idempotency-bytes", "1048576"}, args...),
			admin.Env{Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("bulkd admin %v: %v %s", args, err, errb.String())
		}
		return out.String()
	}
	var v admin.LimitsView
	if err := json.Unmarshal([]byte(run("account", "limits", acct, "--active-jobs", "1", "--stored-bytes", "1GiB")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ActiveJobs.Limit != 1 || v.ActiveJobs.Default != 5 || v.ActiveJobs.Override == nil || *v.ActiveJobs.Override != 1 ||
		v.StoredBytes.Limit != 1<<30 || v.Keys.Override != nil || v.Keys.Used == nil || *v.Keys.Used != 1 ||
		v.IdempotencyBytes.Limit != 1<<20 || v.IdempotencyBytes.Default != 1<<20 || v.IdempotencyBytes.Override != nil ||
		v.IdempotencyBytes.Used == nil || *v.IdempotencyBytes.Used != 0 {
		t.Fatalf("limits view %+v", v)
	}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if r := post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody(fmt.Sprintf("x%d", i), 1)); r.Status != want {
			t.Fatalf("submission %d: %d %s, want %d", i, r.Status, r.Body, want)
		}
	}
	for i := 0; i < 2; i++ {
		if r := post(t, e.URL+"/v1/company-enrichment/bulk", otherKey, domainsBody(fmt.Sprintf("y%d", i), 1)); r.Status != http.StatusOK {
			t.Fatalf("another account's submission %d: %d %s", i, r.Status, r.Body)
		}
	}
	if err := json.Unmarshal([]byte(run("account", "limits", acct)), &v); err != nil {
		t.Fatal(err)
	}
	if v.ActiveJobs.Used == nil || *v.ActiveJobs.Used != 1 || v.StoredBytes.Used == nil || *v.StoredBytes.Used <= 0 {
		t.Fatalf("usage %+v", v)
	}
	if err := json.Unmarshal([]byte(run("account", "limits", acct, "--active-jobs", "default")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ActiveJobs.Limit != 5 || v.ActiveJobs.Override != nil {
		t.Fatalf("after default: %+v", v.ActiveJobs)
	}
	if r := post(t, e.URL+"/v1/company-enrichment/bulk", key, domainsBody("z", 1)); r.Status != http.StatusOK {
		t.Fatalf("after the override was dropped: %d %s", r.Status, r.Body)
	}
	// The key limit through the command and through `key create`.
	run("account", "limits", acct, "--keys", "1")
	var out, errb bytes.Buffer
	err := admin.Main(context.Background(), []string{"--redis-url", redisURL, "key", "create", acct}, admin.Env{Stdout: &out, Stderr: &errb})
	if err == nil || !strings.Contains(err.Error(), "keys") || out.Len() != 0 {
		t.Fatalf("key create over the limit: %v %q", err, out.String())
	}
}

// An invalid row's echo is stored cut (MaxInvalidEcho characters and a
// marker): 1 valid and 30,000 invalid rows of 2,048 characters, one
// credit, used to keep about 63 MB in Redis for the whole retention. The
// test measures the job's keys with MEMORY USAGE and Redis's used_memory
// (docs/benchmarks.md has the numbers before and after).
func TestInvalidEchoStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a 62 MB submission")
	}
	e := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, key := e.Account(credits.Whole(10))
	setLimit(t, e, acct, "stored_bytes", 0) // this test measures, not refuses
	val := strings.Repeat("not a domain ", 158)[:2048]
	var buf bytes.Buffer
	buf.WriteString(`{"input":[{"domain":"valid.example"}`)
	for i := 0; i < 30_000; i++ {
		buf.WriteString(`,{"domain":"`)
		buf.WriteString(val)
		buf.WriteString(`"}`)
	}
	buf.WriteString(`]}`)
	ctx := context.Background()
	before := usedMemory(t, e)
	r := post(t, e.URL+"/v1/company-enrichment/bulk", key, buf.Bytes())
	var sub struct {
		JobID           string  `json:"job_id"`
		TotalInvalid    int     `json:"total_invalid"`
		CreditsConsumed float64 `json:"credits_consumed"`
	}
	r.Decode(t, &sub)
	if r.Status != http.StatusOK || sub.TotalInvalid != 30_000 || sub.CreditsConsumed != 1 {
		t.Fatalf("submission: %d %s", r.Status, r.Body)
	}
	after := usedMemory(t, e)
	var jobBytes int64
	for _, suffix := range []string{"", ":rows", ":in"} {
		n, err := e.Redis.MemoryUsage(ctx, "bulkd:job:{"+sub.JobID+"}"+suffix, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		jobBytes += n
	}
	t.Logf("body %d bytes; job keys %d bytes (MEMORY USAGE); used_memory +%d bytes", buf.Len(), jobBytes, after-before)
	if jobBytes > 12<<20 {
		t.Fatalf("the job keeps %d bytes: invalid rows' echoes are not capped", jobBytes)
	}
	// What the results show: the value cut, with the marker, and why.
	res := e.Get("/v1/company-enrichment/bulk/"+sub.JobID+"/results?limit=2", key)
	var page struct {
		Results []struct {
			Result string  `json:"result"`
			Input  *string `json:"input"`
			Reason *string `json:"reason"`
		} `json:"results"`
	}
	res.Decode(t, &page)
	if len(page.Results) != 2 || page.Results[1].Result != "invalid_url" || page.Results[1].Input == nil ||
		*page.Results[1].Input != val[:256]+"…" || page.Results[1].Reason == nil ||
		!strings.Contains(*page.Results[1].Reason, "cut from 2048 characters") {
		t.Fatalf("results: %s", res.Body)
	}
}

func usedMemory(t *testing.T, e *bulkdtest.Env) int64 {
	t.Helper()
	info, err := e.Redis.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}
