package e2e

// Redis restart: the real `bulkd serve` binary runs company enrichment,
// email verification and email lookup jobs against a Redis with an
// append-only file (appendonly yes, appendfsync everysec, as `make run` and
// the chart run it). In the middle of the jobs Redis is stopped (SIGTERM,
// or SIGKILL once appendfsync everysec has had its second), stays away for
// a while, and comes back on the same port and data. bulkd is not touched.
// Every job accepted before the restart must complete by itself, every row
// answered exactly once and correctly, and every account's balance must
// equal its ledger.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/companyapi"
	"github.com/bulkd/bulkd/test/lookupapi"
)

// TestRedisRestart stops Redis mid-job and starts it again.
func TestRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs jobs across two Redis restarts (about a minute)")
	}
	bin := restartBuild(t)
	t.Run("sigterm", func(t *testing.T) { redisRestartRun(t, bin, false) })
	t.Run("sigkill", func(t *testing.T) { redisRestartRun(t, bin, true) })
}

const (
	// redisDownFor is how long Redis stays away: longer than every retry
	// bulkd made of a failed shard before it had a reason to wait for
	// Redis (200 ms + 400 ms, then the shard's rows were answered as
	// errors).
	redisDownFor = 15 * time.Second
	// redisRecoverWithin bounds how long the jobs may take to complete
	// once Redis is back: well under the 30 s after which a resume pass
	// would pick up shards their worker gave up on.
	redisRecoverWithin = 25 * time.Second
)

// rrJob is one accepted job and what checking it needs.
type rrJob struct {
	family  string
	path    string
	id      string
	rows    int
	charged credits.Amount
}

type rrClient struct {
	t    *testing.T
	url  string
	http *http.Client
}

func (c rrClient) do(method, path, key string, body any) (int, []byte, time.Duration) {
	c.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(res.Body)
	return res.StatusCode, buf.Bytes(), time.Since(t0)
}

// submit posts a job and records it when accepted.
func (c rrClient) submit(family, path, key string, body any, rows int) rrJob {
	c.t.Helper()
	code, b, _ := c.do(http.MethodPost, path, key, body)
	if code != http.StatusOK {
		c.t.Fatalf("submit %s: %d %s", family, code, b)
	}
	var sub struct {
		JobID           string         `json:"job_id"`
		CreditsConsumed credits.Amount `json:"credits_consumed"`
	}
	if err := json.Unmarshal(b, &sub); err != nil {
		c.t.Fatal(err)
	}
	return rrJob{family: family, path: path, id: sub.JobID, rows: rows, charged: sub.CreditsConsumed}
}

// results reads every results row of a job as raw JSON objects.
func (c rrClient) results(j rrJob, key string) []json.RawMessage {
	c.t.Helper()
	var all []json.RawMessage
	for off := 0; off < j.rows; off += 100 {
		code, b, _ := c.do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=100&offset=%d", j.path, j.id, off), key, nil)
		if code != http.StatusOK {
			c.t.Fatalf("%s results at %d: %d %s", j.family, off, code, b)
		}
		var page struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			c.t.Fatal(err)
		}
		all = append(all, page.Results...)
	}
	if len(all) != j.rows {
		c.t.Fatalf("%s: %d results rows, want %d", j.family, len(all), j.rows)
	}
	return all
}

// jobMeta reads a job's metadata hash.
func jobMeta(rdb *redis.Client, id string) map[string]string {
	return rdb.HGetAll(context.Background(), "bulkd:job:{"+id+"}").Val()
}

func metaInt(m map[string]string, k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }

// checkExactlyOnce checks a completed job's counters in Redis: every
// distinct input has exactly one answer, every row is counted once under
// exactly one outcome, nothing is left to retry, and no answer is the
// family's error answer.
func checkExactlyOnce(t *testing.T, rdb *redis.Client, j rrJob) {
	t.Helper()
	ctx := context.Background()
	m := jobMeta(rdb, j.id)
	if m["status"] != "completed" {
		t.Errorf("%s %s: status %q", j.family, j.id, m["status"])
	}
	distinct, total, invalid := metaInt(m, "distinct"), metaInt(m, "total_rows"), metaInt(m, "total_invalid")
	if total != int64(j.rows) {
		t.Errorf("%s: total_rows %d, submitted %d", j.family, total, j.rows)
	}
	if got := metaInt(m, "distinct_processed"); got != distinct {
		t.Errorf("%s: distinct_processed %d, distinct %d", j.family, got, distinct)
	}
	if got := metaInt(m, "rows_processed"); got != total {
		t.Errorf("%s: rows_processed %d, total_rows %d", j.family, got, total)
	}
	if n := rdb.HLen(ctx, "bulkd:job:{"+j.id+"}:ans").Val(); n != distinct {
		t.Errorf("%s: %d answers stored, %d distinct inputs", j.family, n, distinct)
	}
	var outs int64
	var parts []string
	for k, v := range m {
		if o, ok := strings.CutPrefix(k, "out:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			if n < 0 {
				t.Errorf("%s: outcome %s counts %d rows", j.family, o, n)
			}
			outs += n
			parts = append(parts, fmt.Sprintf("%s=%d", o, n))
		}
	}
	sort.Strings(parts)
	if outs != total-invalid {
		t.Errorf("%s: outcome counts %v sum to %d, want %d rows (no row counted twice or missed)", j.family, parts, outs, total-invalid)
	}
	if n := metaInt(m, "out:error"); n != 0 {
		t.Errorf("%s: %d rows answered as errors", j.family, n)
	}
	if n := metaInt(m, "retrying"); n != 0 {
		t.Errorf("%s: %d answers still provisional", j.family, n)
	}
	if n := rdb.ZCard(ctx, "bulkd:job:{"+j.id+"}:retry").Val(); n != 0 {
		t.Errorf("%s: %d retries left", j.family, n)
	}
	if rdb.SIsMember(ctx, "bulkd:jobs:active", j.id).Val() {
		t.Errorf("%s: completed job still active", j.family)
	}
	t.Logf("%s %s: %d rows, %d distinct, outcomes %v", j.family, j.id, total, distinct, parts)
}

// checkLedger checks that the account paid exactly once for each accepted
// job (and was refunded only what a completed verification job refunds),
// that nothing else moved its balance, and that the balance equals the
// ledger.
func checkLedger(t *testing.T, bl *billing.Billing, rdb *redis.Client, acct string, opening credits.Amount, jobs []rrJob) {
	t.Helper()
	ctx := context.Background()
	r, err := bl.Reconcile(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	es, err := bl.Entries(ctx, acct, "", 10_000)
	if err != nil {
		t.Fatal(err)
	}
	charges := map[string][]string{}
	refunds := map[string][]string{}
	for _, e := range es {
		switch e.Kind {
		case billing.KindCharge:
			charges[e.JobID] = append(charges[e.JobID], e.Amount)
		case billing.KindRefund:
			refunds[e.JobID] = append(refunds[e.JobID], e.Amount)
		default:
			t.Errorf("unexpected ledger entry %+v", e)
		}
	}
	want := opening
	accepted := map[string]bool{}
	for _, j := range jobs {
		accepted[j.id] = true
		if got := charges[j.id]; len(got) != 1 || got[0] != (-j.charged).String() {
			t.Errorf("%s %s: charges %v, want exactly one of %s", j.family, j.id, got, -j.charged)
		}
		want -= j.charged
		refunded := credits.Amount(metaInt(jobMeta(rdb, j.id), "refunded"))
		switch got := refunds[j.id]; {
		case refunded == 0 && len(got) != 0:
			t.Errorf("%s %s: refunds %v, the job refunded nothing", j.family, j.id, got)
		case refunded != 0 && (len(got) != 1 || got[0] != refunded.String()):
			t.Errorf("%s %s: refunds %v, want exactly one of %s", j.family, j.id, got, refunded)
		}
		want += refunded
	}
	for id, c := range charges {
		if !accepted[id] && len(refunds[id]) != len(c) {
			t.Errorf("job %s was not accepted but charged %v, refunded %v", id, c, refunds[id])
		}
	}
	if r.Balance != want {
		t.Errorf("balance %s, want %s (opening %s, the accepted jobs' charges, their refunds)", r.Balance, want, opening)
	}
}

func redisRestartRun(t *testing.T, bin string, kill bool) {
	ctx := context.Background()
	d := testredis.StartDurable(t)
	rdb := redis.NewClient(&redis.Options{Addr: d.Addr})
	t.Cleanup(func() { _ = rdb.Close() })

	// Companies for the company job; its websites answer slowly through a
	// proxy, one at a time, so the job runs for several seconds.
	recs, coRows := restartWorkload()
	var jl bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		jl.Write(b)
		jl.WriteByte('\n')
	}
	if _, err := company.Import(ctx, &jl, company.Format("jsonl"), company.NewStore(rdb, "bulkd:"), normalize.New(normalize.DefaultHosts), nil); err != nil {
		t.Fatal(err)
	}
	proxy := &restartProxy{sem: make(chan struct{}, 1), hits: map[string][]time.Time{}}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)

	// The mail world of the verification and lookup jobs.
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	spec, people := mailworld.People(mailworld.PeopleOptions{Domains: 12, PerDomain: 5, RTT: 150 * time.Millisecond, Greylist: time.Second, Seed: 11})
	w, err := mailworld.Start(wctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })

	as := accounts.NewStore(rdb, nil)
	opening := credits.Whole(10_000)
	acct, err := as.CreateAccount(ctx, "redis restart", opening)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := as.CreateKey(ctx, acct.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}

	listen := bulkdtest.FreeAddr(t)
	p := restartServe(t, bin, listen, "--redis-url", d.URL, "--shard-size", "20", "--workers", "6",
		"--redirect-checks=true", "--http-proxy", ps.URL, "--log-format", "text", "--rate-limit", "1000",
		"--dns-server", w.DNSAddr(), "--smtp-port", fmt.Sprint(w.SMTPPort()), "--outbound-allow-cidrs", mailworld.AllowCIDRs,
		"--smtp-command-timeout", "2s",
		"--verify-retry-delays", "1500ms,1500ms,2s", "--verify-single-retry", "0")
	c := rrClient{t: t, url: p.url, http: &http.Client{Timeout: 60 * time.Second}}

	// The jobs.
	coBody := make([]map[string]any, len(coRows))
	for i, r := range coRows {
		coBody[i] = r.body
	}
	var emails []string
	var emailPeople []mailworld.PersonCase
	for _, pc := range people {
		if pc.Email != "" {
			emails = append(emails, pc.Email)
			emailPeople = append(emailPeople, pc)
		}
	}
	lookupRows := make([]lookupapi.In, len(people))
	for i, pc := range people {
		lookupRows[i] = lookupapi.In{FirstName: pc.FirstName, LastName: pc.LastName, Domain: pc.Domain}
	}
	// Six workers: the verification job's two shards, the lookup job's
	// three and the company job's shards one at a time all run at once
	// (the executor takes shards first come, first served).
	verJob := c.submit("email_verification", "/v1/bulk", key, map[string]any{"emails": emails}, len(emails))
	lkJob := c.submit("email_lookup", "/v1/bulk-lookup", key, map[string]any{"input": lookupRows}, len(lookupRows))
	coJob := c.submit("company_enrichment", companyapi.BulkPath, key, map[string]any{"input": coBody}, len(coRows))
	lastAccepted := time.Now()
	jobs := []rrJob{verJob, lkJob, coJob}

	// Wait until the company job is a tenth done and the lookup job has
	// answered some rows, both mid-way (and, before a SIGKILL, until
	// appendfsync everysec has had its second since the last submission
	// was accepted).
	t0 := time.Now()
	for {
		m := jobMeta(rdb, coJob.id)
		lm := jobMeta(rdb, lkJob.id)
		if m["status"] == "completed" {
			t.Fatalf("company job completed in %v before Redis could be stopped: make the proxy slower", time.Since(t0))
		}
		if metaInt(m, "distinct_processed") >= metaInt(m, "distinct")/10 && metaInt(lm, "distinct_processed") > 0 &&
			(!kill || time.Since(lastAccepted) > 1100*time.Millisecond) {
			break
		}
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("no progress: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var state []string
	for _, j := range jobs {
		m := jobMeta(rdb, j.id)
		state = append(state, fmt.Sprintf("%s %s %s/%s", j.family, m["status"], m["distinct_processed"], m["distinct"]))
	}
	how := "SIGTERM"
	stop := d.Terminate
	if kill {
		how, stop = "SIGKILL", d.Kill
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	t.Logf("Redis stopped (%s) %v after the submissions: %s", how, downAt.Sub(lastAccepted).Round(time.Millisecond), strings.Join(state, "; "))

	// While Redis is away the API answers at once, with a server error,
	// and takes no submission.
	if code, b, took := c.do(http.MethodGet, coJob.path+"/"+coJob.id, key, nil); code < 500 || took > 15*time.Second {
		t.Errorf("status while Redis is down: %d in %v: %s", code, took, b)
	} else {
		t.Logf("status while Redis is down: %d in %v", code, took.Round(time.Millisecond))
	}
	if code, b, took := c.do(http.MethodPost, companyapi.BulkPath, key, map[string]any{"input": coBody[:5]}); code < 500 || took > 15*time.Second {
		t.Errorf("submission while Redis is down: %d in %v: %s", code, took, b)
	} else {
		t.Logf("submission while Redis is down: %d in %v", code, took.Round(time.Millisecond))
	}
	time.Sleep(time.Until(downAt.Add(redisDownFor)))
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	t.Logf("Redis back after %v", upAt.Sub(downAt).Round(time.Millisecond))

	// Every accepted job completes by itself: nobody restarts bulkd.
	for _, j := range jobs {
		for {
			if m := jobMeta(rdb, j.id); m["status"] == "completed" {
				t.Logf("%s completed %v after Redis came back", j.family, time.Since(upAt).Round(time.Millisecond))
				break
			} else if time.Since(upAt) > redisRecoverWithin {
				t.Fatalf("%s not completed %v after Redis came back: %v", j.family, redisRecoverWithin, m)
			}
			select {
			case <-p.done:
				t.Fatalf("bulkd exited:\n%s", restartTail(p.logs.String(), 4096))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// And it takes new work again.
	after := c.submit("company_enrichment", companyapi.BulkPath, key, map[string]any{"input": coBody[:30]}, 30)
	bulkdtest.Eventually(t, 30*time.Second, 50*time.Millisecond, "a job submitted after the restart", func() bool {
		return jobMeta(rdb, after.id)["status"] == "completed"
	})
	jobs = append(jobs, after)

	// Exactly once, by the counters.
	for _, j := range jobs {
		checkExactlyOnce(t, rdb, j)
	}
	// No shard was given up because Redis was away: neither answered as
	// errors ("failed for good") nor left for a resume pass 30 s later
	// ("could not record failed shard").
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, "shard failed for good") || strings.Contains(line, "could not record failed shard") {
			t.Errorf("a shard was given up while Redis was away: %s", line)
		}
	}

	// And by the rows: each row's answer is the one the data implies.
	for i, raw := range c.results(coJob, key) {
		var row map[string]any
		if err := json.Unmarshal(raw, &row); err != nil {
			t.Fatal(err)
		}
		coRows[i].check(t, i, row)
	}
	for i, raw := range c.results(verJob, key) {
		var row verifyRow
		if err := json.Unmarshal(raw, &row); err != nil {
			t.Fatal(err)
		}
		pc := emailPeople[i]
		switch {
		case row.Email != pc.Email:
			t.Errorf("verification row %d is %q, submitted %q", i, row.Email, pc.Email)
		case row.Status == "unknown" || row.Retrying:
			t.Errorf("verification of %s: %s/%s (retrying %v): no verdict", pc.Email, row.Status, row.Reason, row.Retrying)
		case pc.Findable && row.Status != "deliverable":
			t.Errorf("verification of %s: %s/%s, want deliverable", pc.Email, row.Status, row.Reason)
		case pc.CatchAll && row.Status != "risky":
			t.Errorf("verification of %s (catch-all): %s/%s, want risky", pc.Email, row.Status, row.Reason)
		}
	}
	var lrows []lookupapi.Row
	for _, raw := range c.results(lkJob, key) {
		var row lookupapi.Row
		if err := json.Unmarshal(raw, &row); err != nil {
			t.Fatal(err)
		}
		lrows = append(lrows, row)
	}
	tally := lookupapi.CheckAgainstTruth(t, people, lrows)
	t.Logf("lookup: %+v", tally)

	// Money: one charge per accepted job, the refunds the jobs made, and
	// the balance equals the ledger.
	checkLedger(t, billing.New(rdb, nil), rdb, acct.ID, opening, jobs)
	if t.Failed() || testing.Verbose() {
		t.Logf("bulkd log (last 12 KB):\n%s", restartTail(p.logs.String(), 12288))
	}
}
