package e2e

// Email lookup end to end in standalone mode: a real bulkd finds people's
// addresses in the mail world's People scenario (authoritative DNS and SMTP
// hosts on loopback, employees under one pattern per domain, catch-all,
// greylisting and mail-less domains), through --dns-server and --smtp-port
// only. Every answer is checked against the world's truth and the OpenAPI
// document.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/test/lookupapi"
)

const (
	lookupPath          = "/v1/bulk-lookup"
	unlimitedLookupPath = "/v1/unlimited/bulk-lookup"
)

// lookupWorld is a running People world and what it says is true.
type lookupWorld struct {
	*mailworld.World
	people []mailworld.PersonCase
}

// lookupStart runs a small People world (12 domains of 4 people: at least
// one domain of each kind) with a 1 s greylist, and a bulkd pointed at it
// that retries greylisted rows after 1 s.
func lookupStart(t *testing.T, opts ...bulkdtest.Option) (*companyAPI, *lookupWorld) {
	t.Helper()
	spec, people := mailworld.People(mailworld.PeopleOptions{Domains: 12, PerDomain: 4, RTT: -1, Greylist: time.Second, Seed: 7})
	w := startWorld(t, spec)
	opts = append([]bulkdtest.Option{bulkdtest.WithConfig(func(c *config.Config) {
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs
		c.SMTPCommandTimeout = 2 * time.Second
		c.VerifyRetryDelays = "1500ms,1500ms,2s"
		c.VerifySingleRetry = 0
		c.LookupTimeout = 10 * time.Second
	})}, opts...)
	return companyStart(t, opts...), &lookupWorld{World: w, people: people}
}

type lookupIn = lookupapi.In

type lookupRow = lookupapi.Row

type lookupSubmission struct {
	JobID           string         `json:"job_id"`
	Status          string         `json:"status"`
	TotalRows       int            `json:"total_rows"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

type lookupStatus = lookupapi.Status

func (w *lookupWorld) rows() []lookupIn {
	out := make([]lookupIn, len(w.people))
	for i, p := range w.people {
		out[i] = lookupIn{FirstName: p.FirstName, LastName: p.LastName, Domain: p.Domain}
	}
	return out
}

func (a *companyAPI) lookupSubmit(t *testing.T, path, key string, rows []lookupIn) lookupSubmission {
	t.Helper()
	r := a.post(t, path, key, map[string]any{"input": rows})
	if r.Status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, r.Status, r.Body)
	}
	var s lookupSubmission
	r.Decode(t, &s)
	return s
}

func (a *companyAPI) lookupStatus(t *testing.T, path, key, id string) lookupStatus {
	t.Helper()
	r := a.get(t, path+"/"+id, key)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s/%s: %d %s", path, id, r.Status, r.Body)
	}
	var s lookupStatus
	r.Decode(t, &s)
	return s
}

func (a *companyAPI) lookupWait(t *testing.T, path, key, id string) lookupStatus {
	t.Helper()
	var st lookupStatus
	bulkdtest.Eventually(t, 60*time.Second, 50*time.Millisecond, "lookup job completed", func() bool {
		st = a.lookupStatus(t, path, key, id)
		return st.Status == "completed"
	})
	return st
}

func (a *companyAPI) lookupResults(t *testing.T, path, key, id string) []lookupRow {
	t.Helper()
	var all []lookupRow
	for off := 0; ; off += 7 {
		r := a.get(t, fmt.Sprintf("%s/%s/results?limit=7&offset=%d", path, id, off), key)
		if r.Status != http.StatusOK {
			t.Fatalf("results: %d %s", r.Status, r.Body)
		}
		var page struct {
			TotalRows      int         `json:"total_rows"`
			TotalProcessed int         `json:"total_processed"`
			Limit, Offset  int         `json:"-"`
			Results        []lookupRow `json:"results"`
		}
		r.Decode(t, &page)
		all = append(all, page.Results...)
		if off+7 >= page.TotalRows {
			return all
		}
	}
}

// SPEC 2.7, 4.2: a pay-as-you-go bulk lookup. Duplicates (case, blanks)
// are one row, charged once, 1 credit each upfront; the status runs then
// completes with found + not_found = processed = total_rows; results can
// be read while the job runs (unanswered rows pending in place); every
// answer agrees with the world, greylisted domains included (after a
// retry); a second job of the same people costs fewer RCPTs (learned
// patterns).
func TestBulkLookupEndToEnd(t *testing.T) {
	env, w := lookupStart(t, bulkdtest.NoWorkers())
	acct, key := env.Account(credits.Whole(500))
	rows := w.rows()
	unique := len(rows)
	dups := []lookupIn{
		{FirstName: "  " + strings.ToUpper(rows[0].FirstName), LastName: rows[0].LastName + " ", Domain: strings.ToUpper(rows[0].Domain)},
		{FirstName: rows[1].FirstName, LastName: strings.ToLower(rows[1].LastName), Domain: " " + rows[1].Domain},
	}
	sub := env.lookupSubmit(t, lookupPath, key, append(append([]lookupIn{}, rows...), dups...))
	if sub.Status != "submitted" || sub.TotalRows != unique || sub.CreditsConsumed != credits.Whole(int64(unique)) {
		t.Fatalf("submission %+v, want %d unique rows charged 1 credit each", sub, unique)
	}
	if got := env.Balance(acct); got != credits.Whole(500-int64(unique)) {
		t.Fatalf("balance %v after the submission", got)
	}

	// No worker yet: the job runs, nothing is processed, and the results
	// are every row pending at its position.
	st := env.lookupStatus(t, lookupPath, key, sub.JobID)
	if st.Status != "running" || st.TotalRows != int64(unique) || st.TotalProcessed != 0 || st.CompletedAt != nil ||
		st.Summary["total_pending"] != int64(unique) || st.CreatedAt.IsZero() {
		t.Fatalf("status before processing %+v", st)
	}
	early := env.lookupResults(t, lookupPath, key, sub.JobID)
	if len(early) != unique {
		t.Fatalf("%d rows while running, want %d", len(early), unique)
	}
	for i, r := range early {
		if r.Status != "pending" || r.Substatus != "queued" || r.Email != nil || r.FirstName != rows[i].FirstName || r.Domain != rows[i].Domain {
			t.Fatalf("row %d while running: %+v (submitted %+v)", i, r, rows[i])
		}
	}

	env.StartWorkers()
	sawRetrying := false
	bulkdtest.Eventually(t, 60*time.Second, 20*time.Millisecond, "lookup completed", func() bool {
		st = env.lookupStatus(t, lookupPath, key, sub.JobID)
		if st.Summary["total_retrying"] > 0 {
			sawRetrying = true
			if st.Status != "running" {
				t.Errorf("retrying rows in a %s job", st.Status)
			}
		}
		return st.Status == "completed"
	})
	if !sawRetrying {
		t.Errorf("no row waited for a retry: the world's greylisting domain was not exercised")
	}
	if st.TotalProcessed != int64(unique) || st.Summary["total_found"]+st.Summary["total_not_found"] != st.TotalProcessed ||
		st.CompletedAt == nil || st.CompletedAt.Before(st.CreatedAt) || st.Summary["total_pending"] != 0 || st.Summary["total_retrying"] != 0 {
		t.Fatalf("completed status %+v", st)
	}
	// Every unique row once, in submission order (its echo), as the world
	// says.
	found := lookupapi.CheckAgainstTruth(t, w.people, env.lookupResults(t, lookupPath, key, sub.JobID)).Found
	if int64(found) != st.Summary["total_found"] {
		t.Errorf("%d found rows, summary says %d", found, st.Summary["total_found"])
	}
	// Every returned row is charged (SPEC 4.2 rule 2): no refund.
	if got := env.Balance(acct); got != credits.Whole(500-int64(unique)) {
		t.Errorf("balance %v after completion", got)
	}
	cold := w.Stats()
	if cold.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", cold.Rejected421)
	}

	// The same people again, in a new job: the patterns learned in Redis
	// make it cheaper, and the answers are the same.
	w.ResetStats()
	sub2 := env.lookupSubmit(t, lookupPath, key, rows)
	env.lookupWait(t, lookupPath, key, sub2.JobID)
	lookupapi.CheckAgainstTruth(t, w.people, env.lookupResults(t, lookupPath, key, sub2.JobID))
	warm := w.Stats()
	t.Logf("RCPTs: cold %d (%.2f per row), with learned patterns %d (%.2f per row)", cold.Rcpts,
		float64(cold.Rcpts)/float64(unique), warm.Rcpts, float64(warm.Rcpts)/float64(unique))
	if warm.Rcpts >= cold.Rcpts {
		t.Errorf("learned patterns did not save RCPTs: %d then %d", cold.Rcpts, warm.Rcpts)
	}
}

// SPEC 2.7 and section 7: the 400s, 422s and 404s of bulk lookup, and
// that a refused submission costs nothing.
func TestBulkLookupErrors(t *testing.T) {
	env, _ := lookupStart(t, bulkdtest.NoWorkers())
	acct, key := env.Account(credits.Whole(3))
	post := func(path, body string) (int, string) {
		r := env.do(t, http.MethodPost, path, key, []byte(body))
		return r.Status, string(r.Body)
	}
	long := strings.Repeat("é", 256)
	for _, c := range []struct {
		body, want string
		status     int
	}{
		{`{"input": []}`, "empty", 400},
		{`{"input": [`, "", 400},
		{`{}`, `"loc":"body.input"`, 422},
		{`{"input": [{"first_name": "A", "last_name": "B"}]}`, `"loc":"body.input.0.domain","msg":"Field required","type":"missing"`, 422},
		{`{"input": [{"first_name": "A", "last_name": "B", "domain": "x.test"}, {"first_name": 5, "last_name": "B", "domain": "x.test"}]}`, `"loc":"body.input.1.first_name"`, 422},
		{`{"input": [{"first_name": "A", "last_name": "` + long + `", "domain": "x.test"}]}`, `"loc":"body.input.0.last_name","msg":"String should have at most 255 characters","type":"string_too_long"`, 422},
		{`{"input": ["a"]}`, `"loc":"body.input.0"`, 422},
	} {
		if st, body := post(lookupPath, c.body); st != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%.60s: %d %s, want %d with %s", c.body, st, body, c.status, c.want)
		}
	}
	// 10,001 rows: 422 at body.input.
	var b strings.Builder
	b.WriteString(`{"input": [`)
	for i := range 10_001 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"first_name":"a%d","last_name":"b","domain":"x.test"}`, i)
	}
	b.WriteString("]}")
	if st, body := post(lookupPath, b.String()); st != 422 || !strings.Contains(body, `"loc":"body.input"`) {
		t.Errorf("10,001 rows: %d %.300s", st, body)
	}
	// 4 unique rows with 3 credits: 403 naming balance and requirement.
	var rows []lookupIn
	for _, n := range [][3]string{{"a", "b", "x.test"}, {"c", "d", "x.test"}, {"e", "f", "x.test"}, {"g", "h", "x.test"}, {"A", "B", "X.test"}} {
		rows = append(rows, lookupIn{FirstName: n[0], LastName: n[1], Domain: n[2]})
	}
	if r := env.post(t, lookupPath, key, map[string]any{"input": rows}); r.Status != 403 || !strings.Contains(string(r.Body), "3") || !strings.Contains(string(r.Body), "4") {
		t.Errorf("short balance: %d %s", r.Status, r.Body)
	}
	if got := env.Balance(acct); got != credits.Whole(3) {
		t.Errorf("balance %v after refused submissions", got)
	}
	sub := env.lookupSubmit(t, lookupPath, key, rows[:3])
	if got := env.Balance(acct); got != 0 || sub.TotalRows != 3 {
		t.Errorf("balance %v, total_rows %d", got, sub.TotalRows)
	}
	for _, p := range []string{"/not-a-uuid", "/not-a-uuid/results"} {
		if r := env.get(t, lookupPath+p, key); r.Status != 400 {
			t.Errorf("GET %s: %d %s", p, r.Status, r.Body)
		}
	}
	other := env.Key(acct, accounts.PayAsYouGo)
	for _, p := range []string{"/" + sub.JobID, "/" + sub.JobID + "/results"} {
		if r := env.get(t, lookupPath+p, other); r.Status != 404 || !strings.Contains(string(r.Body), "Job not found") {
			t.Errorf("another key's job %s: %d %s", p, r.Status, r.Body)
		}
	}
	for _, q := range []string{"limit=0", "limit=501", "offset=-1", "limit=x"} {
		if r := env.get(t, lookupPath+"/"+sub.JobID+"/results?"+q, key); r.Status != 422 {
			t.Errorf("results ?%s: %d %s", q, r.Status, r.Body)
		}
	}
}

// unlimitedAccount creates an account on plan with an unlimited key whose
// period ends in a month.
func unlimitedAccount(t *testing.T, env *companyAPI, plan accounts.Plan) (acct, key string) {
	t.Helper()
	acct, _ = env.Account(0)
	if err := env.Parts.API.Accounts.SetPlan(context.Background(), acct, plan, accounts.StateActive, env.Clock.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return acct, env.Key(acct, accounts.Unlimited)
}

type usage struct {
	BulkSearchesUsed      int64     `json:"bulk_searches_used"`
	BulkSearchesLimit     int64     `json:"bulk_searches_limit"`
	BulkSearchesRemaining int64     `json:"bulk_searches_remaining"`
	BulkSearchesResetAt   time.Time `json:"bulk_searches_reset_at"`
	SingleLookupsUsed     int64     `json:"single_lookups_used"`
	SingleLookupsLimit    int64     `json:"single_lookups_limit"`
}

func (a *companyAPI) usage(t *testing.T, key string) usage {
	t.Helper()
	r := a.get(t, "/v1/unlimited/usage", key)
	if r.Status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.Status, r.Body)
	}
	var u usage
	r.Decode(t, &u)
	return u
}

func distinctRows(n int, tag string) []lookupIn {
	rows := make([]lookupIn, n)
	for i := range rows {
		rows[i] = lookupIn{FirstName: fmt.Sprintf("p%s%d", tag, i), LastName: "person", Domain: "example.test"}
	}
	return rows
}

// SPEC 4.3 and section 8: the unlimited bulk lookup consumes one search per
// unique row of the daily quota, exactly up to it; one more is 429
// bulk_searches_limited with Retry-After to UTC midnight and nothing
// consumed; the next UTC day starts from zero. No credits are taken.
func TestUnlimitedBulkLookupQuota(t *testing.T) {
	env, _ := lookupStart(t, bulkdtest.NoWorkers())
	day := time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC)
	env.Clock.Set(day)
	acct, key := unlimitedAccount(t, env, accounts.PlanStarter) // 10,000 a day

	sub := env.lookupSubmit(t, unlimitedLookupPath, key, append(distinctRows(9_990, "a"), distinctRows(5, "a")...))
	if sub.TotalRows != 9_990 || sub.CreditsConsumed != 0 {
		t.Fatalf("submission %+v", sub)
	}
	// Exactly at the quota: accepted.
	if s := env.lookupSubmit(t, unlimitedLookupPath, key, distinctRows(10, "b")); s.TotalRows != 10 {
		t.Fatalf("the last 10 searches: %+v", s)
	}
	u := env.usage(t, key)
	if u.BulkSearchesUsed != 10_000 || u.BulkSearchesRemaining != 0 || u.BulkSearchesLimit != 10_000 ||
		!u.BulkSearchesResetAt.Equal(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("usage at the quota %+v", u)
	}
	// One over: 429, nothing consumed.
	r := env.post(t, unlimitedLookupPath, key, map[string]any{"input": distinctRows(1, "c")})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), `"code":"bulk_searches_limited"`) {
		t.Fatalf("over the quota: %d %s", r.Status, r.Body)
	}
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 55 || ra > 61 {
		t.Errorf("Retry-After %q at 23:59 UTC", r.Header.Get("Retry-After"))
	}
	if u := env.usage(t, key); u.BulkSearchesUsed != 10_000 {
		t.Errorf("a refused submission consumed: %+v", u)
	}
	if got := env.Balance(acct); got != 0 {
		t.Errorf("credits moved on an unlimited account: %v", got)
	}
	// The status of an unlimited job shows no credits, through the
	// unlimited path only.
	if st := env.lookupStatus(t, unlimitedLookupPath, key, sub.JobID); st.CreditsConsumed != 0 || st.TotalRows != 9_990 {
		t.Errorf("unlimited status %+v", st)
	}
	// UTC midnight: a new day, a new quota.
	env.Clock.Set(day.Add(61 * time.Second))
	if u := env.usage(t, key); u.BulkSearchesUsed != 0 || u.BulkSearchesRemaining != 10_000 {
		t.Errorf("usage after midnight %+v", u)
	}
	if s := env.lookupSubmit(t, unlimitedLookupPath, key, distinctRows(1, "c")); s.TotalRows != 1 {
		t.Errorf("after midnight: %+v", s)
	}
}

// 200 concurrent unlimited submissions of 100 unique rows each on a
// 10,000-a-day plan, from two keys of one account: exactly 100 are
// accepted, the rest are 429, and the day's use ends at exactly 10,000.
func TestUnlimitedBulkLookupConcurrentQuota(t *testing.T) {
	// The quota is under test: 200 jobs that never run, past the default
	// limit of active jobs per account (docs/security.md).
	env, _ := lookupStart(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.AccountMaxActiveJobs = 0 }))
	acct, key := unlimitedAccount(t, env, accounts.PlanStarter)
	keys := []string{key, env.Key(acct, accounts.Unlimited)}
	var mu sync.Mutex
	byStatus := map[int]int{}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := env.send(t, http.MethodPost, unlimitedLookupPath, keys[i%2], mustJSON(t, map[string]any{"input": distinctRows(100, strconv.Itoa(i))}))
			mu.Lock()
			byStatus[r.Status]++
			mu.Unlock()
			if r.Status != 200 && (r.Status != 429 || !strings.Contains(string(r.Body), "bulk_searches_limited")) {
				t.Errorf("submission %d: %d %s", i, r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if byStatus[200] != 100 || byStatus[429] != 100 {
		t.Errorf("answers %v, want 100 accepted and 100 refused", byStatus)
	}
	if u := env.usage(t, key); u.BulkSearchesUsed != 10_000 {
		t.Errorf("quota used %d, want exactly 10,000", u.BulkSearchesUsed)
	}
}

// SPEC section 5: keys of the other family, a lapsed plan, an expired
// period.
func TestBulkLookupKeyFamilies(t *testing.T) {
	env, _ := lookupStart(t, bulkdtest.NoWorkers())
	acct, payg := env.Account(credits.Whole(10))
	body := map[string]any{"input": distinctRows(1, "k")}
	if r := env.post(t, unlimitedLookupPath, payg, body); r.Status != 403 || !strings.Contains(string(r.Body), "wrong_key_plan") {
		t.Errorf("pay-as-you-go key on the unlimited path: %d %s", r.Status, r.Body)
	}
	if err := env.Parts.API.Accounts.SetPlan(context.Background(), acct, accounts.PlanStandard, accounts.StateActive, env.Clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	unl := env.Key(acct, accounts.Unlimited)
	for _, p := range []string{lookupPath, "/v1/email-lookup"} {
		if r := env.post(t, p, unl, body); r.Status != 403 || !strings.Contains(string(r.Body), "wrong_key_plan") {
			t.Errorf("unlimited key on %s: %d %s", p, r.Status, r.Body)
		}
	}
	sub := env.lookupSubmit(t, unlimitedLookupPath, unl, distinctRows(2, "k"))
	// The job is read through its own family's path only.
	if r := env.get(t, lookupPath+"/"+sub.JobID, unl); r.Status != 403 {
		t.Errorf("unlimited job via the metered path: %d %s", r.Status, r.Body)
	}
	// The period ends: lapsed until renewed.
	env.Clock.Set(time.Now().Add(2 * time.Hour))
	if r := env.post(t, unlimitedLookupPath, unl, body); r.Status != 402 || !strings.Contains(string(r.Body), "subscription_inactive") {
		t.Errorf("expired period: %d %s", r.Status, r.Body)
	}
	env.Clock.Set(time.Now())
	if err := env.Parts.API.Accounts.SetPlan(context.Background(), acct, accounts.PlanStandard, accounts.StateLapsed, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []bulkdtest.Response{
		env.post(t, unlimitedLookupPath, unl, body),
		env.get(t, unlimitedLookupPath+"/"+sub.JobID, unl),
		env.post(t, "/v1/unlimited/email-lookup", unl, lookupIn{FirstName: "a", LastName: "b", Domain: "example.test"}),
	} {
		if r.Status != 402 || !strings.Contains(string(r.Body), "subscription_inactive") {
			t.Errorf("lapsed plan: %d %s", r.Status, r.Body)
		}
	}
}

// POST /v1/email-lookup: 1 credit for an answer (found, or not_found for
// a reason), nothing when the finder cannot tell (502); POST
// /v1/unlimited/email-lookup: no credits, the monthly cap (429
// monthly_quota_exceeded, Retry-After to the period's end) and the
// per-account rate.
func TestSingleEmailLookup(t *testing.T) {
	env, w := lookupStart(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.MonthlyLookupCaps = "starter=3"
	}))
	acct, key := env.Account(credits.Whole(10))
	var findable, noMail, grey mailworld.PersonCase
	for _, p := range w.people {
		switch {
		case p.Findable && !p.Greylisted && findable.Email == "":
			findable = p
		case p.Reason == "no_such_domain":
			noMail = p
		case p.Greylisted && grey.Domain == "":
			grey = p
		}
	}
	single := func(path, key string, p mailworld.PersonCase) (bulkdtest.Response, lookupRow) {
		r := env.post(t, path, key, lookupIn{FirstName: p.FirstName, LastName: p.LastName, Domain: p.Domain})
		var row lookupRow
		if r.Status == 200 {
			r.Decode(t, &row)
		}
		return r, row
	}
	r, row := single("/v1/email-lookup", key, findable)
	if r.Status != 200 || row.Status != "found" || row.Email == nil || *row.Email != findable.Email || row.CreditsConsumed == nil || *row.CreditsConsumed != credits.Whole(1) ||
		row.FirstName != findable.FirstName {
		t.Fatalf("findable: %d %s", r.Status, r.Body)
	}
	r, row = single("/v1/email-lookup", key, noMail)
	if r.Status != 200 || row.Status != "not_found" || row.Substatus != "no_such_domain" || *row.CreditsConsumed != credits.Whole(1) {
		t.Errorf("no such domain: %d %s", r.Status, r.Body)
	}
	r, _ = single("/v1/email-lookup", key, grey)
	if r.Status != http.StatusBadGateway {
		t.Errorf("greylisted: %d %s", r.Status, r.Body)
	}
	if got := env.Balance(acct); got != credits.Whole(8) {
		t.Errorf("balance %v after 2 answers and a 502", got)
	}
	if r := env.post(t, "/v1/email-lookup", key, map[string]string{"first_name": "a"}); r.Status != 422 ||
		!strings.Contains(string(r.Body), `"loc":"body.last_name"`) || !strings.Contains(string(r.Body), `"loc":"body.domain"`) {
		t.Errorf("missing fields: %d %s", r.Status, r.Body)
	}

	// Unlimited: cap 3 in the period (configured), credits untouched.
	uacct, ukey := unlimitedAccount(t, env, accounts.PlanStarter)
	for i := range 3 {
		time.Sleep(150 * time.Millisecond) // under the per-account rate
		r, row := single("/v1/unlimited/email-lookup", ukey, findable)
		if r.Status != 200 || *row.CreditsConsumed != 0 {
			t.Fatalf("unlimited lookup %d: %d %s", i, r.Status, r.Body)
		}
	}
	r, _ = single("/v1/unlimited/email-lookup", ukey, findable)
	if r.Status != 429 || !strings.Contains(string(r.Body), "monthly_quota_exceeded") {
		t.Fatalf("over the monthly cap: %d %s", r.Status, r.Body)
	}
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 29*24*3600 || ra > 30*24*3600+60 {
		t.Errorf("Retry-After %q, want the seconds to the period's end", r.Header.Get("Retry-After"))
	}
	if u := env.usage(t, ukey); u.SingleLookupsUsed != 3 || u.SingleLookupsLimit != 3 {
		t.Errorf("usage %+v", u)
	}
	if got := env.Balance(uacct); got != 0 {
		t.Errorf("credits moved: %v", got)
	}
}

// The per-account rate of unlimited single lookups is shared by the
// account's keys.
func TestUnlimitedSingleLookupRate(t *testing.T) {
	env, w := lookupStart(t, bulkdtest.WithConfig(func(c *config.Config) { c.UnlimitedLookupRPS = 2 }))
	acct, key := unlimitedAccount(t, env, accounts.PlanProfessional)
	keys := []string{key, env.Key(acct, accounts.Unlimited)}
	var p mailworld.PersonCase
	for _, c := range w.people {
		if c.Findable && !c.Greylisted {
			p = c
			break
		}
	}
	limited := 0
	for i := range 6 {
		r := env.post(t, "/v1/unlimited/email-lookup", keys[i%2], lookupIn{FirstName: p.FirstName, LastName: p.LastName, Domain: p.Domain})
		if r.Status == 429 {
			limited++
			if !strings.Contains(string(r.Body), "rate_limited") || r.Header.Get("Retry-After") == "" {
				t.Errorf("rate limited: %s %v", r.Body, r.Header)
			}
		}
	}
	if limited < 3 {
		t.Errorf("%d of 6 immediate lookups limited at 2 per second per account", limited)
	}
	// Nothing consumed for the limited ones.
	if u := env.usage(t, key); u.SingleLookupsUsed != int64(6-limited) {
		t.Errorf("single lookups used %d, want %d", u.SingleLookupsUsed, 6-limited)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SPEC section 8, quota rule 4: an unlimited submission that fails after
// its searches were consumed (here: storing the job) gives them back, and
// no job exists.
func TestUnlimitedBulkLookupFailedSubmissionConsumesNothing(t *testing.T) {
	env, _ := lookupStart(t, bulkdtest.NoWorkers())
	_, key := unlimitedAccount(t, env, accounts.PlanStarter)
	var fired atomic.Int32
	env.Parts.Engine.SetFailpoint(func(step string) error {
		if step == jobs.StepStore && fired.Add(1) == 1 {
			return errors.New("injected failure at " + step)
		}
		return nil
	})
	if r := env.post(t, unlimitedLookupPath, key, map[string]any{"input": distinctRows(50, "f")}); r.Status != http.StatusInternalServerError {
		t.Fatalf("failed submission: %d %s", r.Status, r.Body)
	}
	if u := env.usage(t, key); u.BulkSearchesUsed != 0 {
		t.Errorf("a failed submission consumed %d searches", u.BulkSearchesUsed)
	}
	if s := env.lookupSubmit(t, unlimitedLookupPath, key, distinctRows(50, "f")); s.TotalRows != 50 {
		t.Errorf("after the failure: %+v", s)
	}
	if u := env.usage(t, key); u.BulkSearchesUsed != 50 {
		t.Errorf("used %d, want 50", u.BulkSearchesUsed)
	}
}
