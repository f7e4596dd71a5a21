package e2e

// Email verification end to end in standalone mode: a real bulkd talks to
// the project's mail world (authoritative DNS and SMTP hosts on loopback)
// through --dns-server and --smtp-port only.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// verifyStart runs a mail world with every class and a bulkd pointed at it.
// Greylisting lasts 1 s and bulkd retries after 1 s (twice); the tarpit
// answers slower than bulkd's 1 s command timeout.
func verifyStart(t *testing.T) (*companyAPI, *mailworld.World) {
	t.Helper()
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{Greylist: time.Second, Tarpit: 3 * time.Second}))
	env := companyStart(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs
		c.SMTPCommandTimeout = time.Second
		c.VerifyRetryDelays = "1s,1s"
		c.VerifySingleRetry = 1500 * time.Millisecond // the single check waits out the 1 s greylist
	}))
	return env, w
}

// verifyRow is one results row of a verification job.
type verifyRow struct {
	Input           string         `json:"input"`
	Email           string         `json:"email"`
	Status          string         `json:"status"`
	Reason          string         `json:"reason"`
	Retrying        bool           `json:"retrying"`
	Attempts        int            `json:"attempts"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
	IsCatchAll      bool           `json:"is_catch_all"`
	HasFullInbox    bool           `json:"has_full_inbox"`
	IsDisabled      bool           `json:"is_disabled"`
	Score           int            `json:"score"`
}

// Every class of the mail world through POST /v1/bulk: 0.2 credits per
// unique address upfront, in_progress (results 409) until every address has
// a first answer, partial_complete_retrying while the greylisted ones and
// the tarpit's (its timeout is provisional) wait (partial results
// readable), complete after the retry; every knowable
// answer exact, nothing reported deliverable that is not, and unknown
// answers refunded at completion.
func TestBulkVerificationEveryClass(t *testing.T) {
	env, w := verifyStart(t)
	acct, key := env.Account(credits.Whole(100))
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	// Duplicates written differently are one address (domain case, blanks,
	// local-part case).
	emails = append(emails, "  alice@OK.test ", "ALICE@ok.test", "bob@ok.test")
	unique := len(w.Cases())

	r := env.post(t, "/v1/bulk", key, map[string]any{"emails": emails})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID           string         `json:"job_id"`
		Status          string         `json:"status"`
		TotalEmails     int            `json:"total_emails"`
		EstimatedCost   json.Number    `json:"estimated_cost"`
		CreditsConsumed credits.Amount `json:"credits_consumed"`
	}
	r.Decode(t, &sub)
	charge := credits.Amount(200 * unique)
	if sub.Status != "submitted" || sub.TotalEmails != unique || sub.CreditsConsumed != charge ||
		sub.EstimatedCost.String() != fmt.Sprint((int(charge)+999)/1000) {
		t.Fatalf("submission answer %s (want %d unique, %v charged)", r.Body, unique, charge)
	}
	if got := env.Balance(acct); got != credits.Whole(100)-charge {
		t.Fatalf("balance after submit %v", got)
	}
	// The tarpit holds the first pass for a second: results are refused
	// while in progress, naming the status.
	if r := env.get(t, "/v1/bulk/"+sub.JobID+"/results", key); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "in_progress") {
		t.Fatalf("results while in progress: %d %s", r.Status, r.Body)
	}

	statuses := map[string]bool{}
	var st map[string]any
	defer func() { t.Logf("last status %v", st) }()
	bulkdtest.Eventually(t, 30*time.Second, 20*time.Millisecond, "complete", func() bool {
		r := env.get(t, "/v1/bulk/"+sub.JobID, key)
		st = map[string]any{}
		r.Decode(t, &st)
		statuses[st["status"].(string)] = true
		if st["status"] == "partial_complete_retrying" && !statuses["partial seen"] {
			statuses["partial seen"] = true
			rows := verifyResults(t, env, key, sub.JobID)
			if len(rows) != unique {
				t.Errorf("partial results: %d rows", len(rows))
			}
			// Answers are recorded as they arrive (issue 25): the
			// greylisted address's retry is due 1 s after its own first
			// answer, which may be before the tarpit's answers end the
			// first pass; then it is already answered for good.
			for _, row := range rows {
				provisional := row.Retrying && row.Status == "unknown" && row.Reason == "greylisted"
				retried := !row.Retrying && row.Status == "deliverable" && row.Attempts == 2
				if row.Email == "alice@grey.test" && !provisional && !retried {
					t.Errorf("greylisted row while retrying: %+v", row)
				}
			}
		}
		return st["status"] == "complete"
	})
	t.Logf("final status %v", st)
	if !statuses["in_progress"] || !statuses["partial seen"] {
		t.Errorf("statuses seen %v, want in_progress, partial_complete_retrying, complete", statuses)
	}

	rows := verifyResults(t, env, key, sub.JobID)
	if len(rows) != unique {
		t.Fatalf("%d rows, want %d", len(rows), unique)
	}
	unknown := 0
	for _, row := range rows {
		c, ok := w.Expect(row.Input)
		if !ok {
			t.Errorf("row for %q not in the world", row.Input)
			continue
		}
		if row.Status == "deliverable" && c.Status != "deliverable" {
			t.Errorf("FALSE DELIVERABLE %s: %+v", row.Input, row)
		}
		if c.Knowable && (row.Status != c.Status || row.Reason != c.Reason) {
			t.Errorf("%s: %s/%s, want %s/%s", row.Input, row.Status, row.Reason, c.Status, c.Reason)
		}
		if row.Status == "unknown" {
			unknown++
			if row.CreditsConsumed != 0 {
				t.Errorf("%s: unknown charged %v", row.Input, row.CreditsConsumed)
			}
		} else if row.CreditsConsumed != 200 {
			t.Errorf("%s: charged %v", row.Input, row.CreditsConsumed)
		}
		if row.Retrying {
			t.Errorf("%s still retrying in a complete job", row.Input)
		}
	}
	if got, want := env.Balance(acct), credits.Whole(100)-charge+credits.Amount(200*unknown); got != want {
		t.Errorf("balance %v, want %v (%d unknown refunded)", got, want, unknown)
	}
	if st["credits_refunded"] != float64(unknown)*0.2 && fmt.Sprint(st["credits_refunded"]) != fmt.Sprint(credits.Amount(200*unknown)) {
		t.Errorf("status credits_refunded %v, want %v", st["credits_refunded"], credits.Amount(200*unknown))
	}
	if s := w.Stats(); s.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421: bulkd was not polite", s.Rejected421)
	}
}

// verifyResults pages through a job's results.
func verifyResults(t *testing.T, env *companyAPI, key, id string) []verifyRow {
	t.Helper()
	var all []verifyRow
	for off := 0; ; off += 20 {
		r := env.get(t, fmt.Sprintf("/v1/bulk/%s/results?limit=20&offset=%d", id, off), key)
		if r.Status != http.StatusOK {
			t.Fatalf("results: %d %s", r.Status, r.Body)
		}
		var page struct {
			TotalRows int         `json:"total_rows"`
			Results   []verifyRow `json:"results"`
		}
		r.Decode(t, &page)
		all = append(all, page.Results...)
		if off+20 >= page.TotalRows {
			return all
		}
	}
}

// SPEC 4.4 rule 3 and 2.8: the 400s and 422s of bulk verification, and
// job ownership.
func TestBulkVerificationErrors(t *testing.T) {
	env, _ := verifyStart(t)
	acct, key := env.Account(credits.Whole(10))
	post := func(body string) (int, string) {
		r := env.do(t, http.MethodPost, "/v1/bulk", key, []byte(body))
		return r.Status, string(r.Body)
	}
	if code, body := post(`{"emails":[]}`); code != 400 || !strings.Contains(body, "empty") {
		t.Errorf("empty list: %d %s", code, body)
	}
	big := `{"emails":[` + strings.Repeat(`"a@b.test",`, 100_000) + `"a@b.test"]}`
	if code, body := post(big); code != 400 || !strings.Contains(body, "100000") {
		t.Errorf("100,001 emails: %d %.200s", code, body)
	}
	if code, body := post(`{"emails":["ab","ok@ok.test",5,"` + strings.Repeat("x", 321) + `"]}`); code != 422 ||
		!strings.Contains(body, `"loc":"body.emails.0"`) || !strings.Contains(body, `"loc":"body.emails.2"`) || !strings.Contains(body, `"loc":"body.emails.3"`) {
		t.Errorf("bad items: %d %s", code, body)
	}
	if code, body := post(`{"other":1}`); code != 422 || !strings.Contains(body, "body.emails") {
		t.Errorf("no emails field: %d %s", code, body)
	}
	if got := env.Balance(acct); got != credits.Whole(10) {
		t.Errorf("rejected submissions charged: balance %v", got)
	}
	poor, poorKey := env.Account(credits.Amount(300)) // 0.3 credits: one address, not two
	if code, body := post2(t, env, poorKey, `{"emails":["a@ok.test","b@ok.test"]}`); code != 403 || !strings.Contains(body, "0.4") {
		t.Errorf("short balance: %d %s", code, body)
	}
	if got := env.Balance(poor); got != 300 {
		t.Errorf("refused submission charged: %v", got)
	}
	if r := env.get(t, "/v1/bulk/not-a-uuid", key); r.Status != 400 {
		t.Errorf("bad job id: %d %s", r.Status, r.Body)
	}
	if r := env.get(t, "/v1/bulk/not-a-uuid/results", key); r.Status != 400 {
		t.Errorf("bad job id on results: %d %s", r.Status, r.Body)
	}
	r := env.post(t, "/v1/bulk", key, map[string]any{"emails": []string{"alice@ok.test"}})
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	other := env.Key(acct, accounts.PayAsYouGo)
	if r := env.get(t, "/v1/bulk/"+sub.JobID, other); r.Status != 404 || !strings.Contains(string(r.Body), "Job not found") {
		t.Errorf("another key's job: %d %s", r.Status, r.Body)
	}
	if r := env.get(t, "/v1/bulk/00000000-0000-4000-8000-000000000000", key); r.Status != 404 {
		t.Errorf("unknown job: %d %s", r.Status, r.Body)
	}
	// A company job is not a verification job, and the other way round.
	if r := env.get(t, "/v1/company-enrichment/bulk/"+sub.JobID, key); r.Status != 404 {
		t.Errorf("verification job read as a company job: %d", r.Status)
	}
}

func post2(t *testing.T, env *companyAPI, key, body string) (int, string) {
	r := env.do(t, http.MethodPost, "/v1/bulk", key, []byte(body))
	return r.Status, string(r.Body)
}

// GET /v1/verify: a verdict within the timeout for 0.2 credits; an unknown
// verdict costs nothing; the timeout is bounded to 3..97 seconds.
func TestSingleVerify(t *testing.T) {
	env, _ := verifyStart(t)
	acct, key := env.Account(credits.Whole(1))
	get := func(q string) (int, map[string]any) {
		r := env.get(t, "/v1/verify?"+q, key)
		m := map[string]any{}
		_ = json.Unmarshal(r.Body, &m)
		return r.Status, m
	}
	if code, m := get("email=alice@ok.test&timeout=10"); code != 200 || m["status"] != "deliverable" || m["reason"] != "accepted" || m["credits_consumed"] != 0.2 {
		t.Fatalf("deliverable: %d %v", code, m)
	}
	if code, m := get("email=nobody@ok.test"); code != 200 || m["status"] != "undeliverable" || m["reason"] != "mailbox_not_found" {
		t.Fatalf("unknown user: %d %v", code, m)
	}
	if code, m := get("email=alice@refused.test&timeout=5"); code != 200 || m["status"] != "unknown" || m["credits_consumed"] != 0.0 {
		t.Fatalf("refused host: %d %v", code, m)
	}
	if got := env.Balance(acct); got != credits.Whole(1)-400 {
		t.Errorf("balance %v: two verdicts charged, the unknown one not", got)
	}
	for _, q := range []string{"email=alice@ok.test&timeout=2", "email=alice@ok.test&timeout=98", "email=alice@ok.test&timeout=x", "email=ab", "timeout=5"} {
		if code, m := get(q); code != 422 || m["errors"] == nil {
			t.Errorf("%s: %d %v", q, code, m)
		}
	}
	// The tarpit does not answer within a 3 s timeout: 502, refunded.
	if code, m := get("email=alice@tarpit.test&timeout=3"); code != 502 && !(code == 200 && m["status"] == "unknown") {
		t.Errorf("tarpit: %d %v", code, m)
	}
	if got := env.Balance(acct); got != credits.Whole(1)-400 {
		t.Errorf("balance %v after refunded checks", got)
	}
}

// Every class of the mail world through GET /v1/verify: the same verdicts
// as bulk (the single check waits out the short greylist within its
// timeout), charged 0.2 except unknown verdicts.
func TestSingleVerifyEveryClass(t *testing.T) {
	env, w := verifyStart(t)
	acct, key := env.Account(credits.Whole(100))
	charged := credits.Amount(0)
	for _, c := range w.Cases() {
		r := env.get(t, "/v1/verify?timeout=20&email="+url.QueryEscape(c.Email), key)
		var got struct {
			Status          string         `json:"status"`
			Reason          string         `json:"reason"`
			CreditsConsumed credits.Amount `json:"credits_consumed"`
		}
		if r.Status != http.StatusOK {
			t.Errorf("%s: %d %s", c.Email, r.Status, r.Body)
			continue
		}
		r.Decode(t, &got)
		if got.Status == "deliverable" && c.Status != "deliverable" {
			t.Errorf("FALSE DELIVERABLE %s: %+v", c.Email, got)
		}
		if c.Knowable && (got.Status != c.Status || got.Reason != c.Reason) {
			t.Errorf("%s: %s/%s, want %s/%s", c.Email, got.Status, got.Reason, c.Status, c.Reason)
		}
		want := credits.Amount(200)
		if got.Status == "unknown" {
			want = 0
		}
		if got.CreditsConsumed != want {
			t.Errorf("%s: charged %v, want %v", c.Email, got.CreditsConsumed, want)
		}
		charged += got.CreditsConsumed
	}
	if got := env.Balance(acct); got != credits.Whole(100)-charged {
		t.Errorf("balance %v, want %v", got, credits.Whole(100)-charged)
	}
	if s := w.Stats(); s.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", s.Rejected421)
	}
}

// startWorld starts a mail world for the test and stops it at its end.
func startWorld(t *testing.T, spec mailworld.Spec) *mailworld.World {
	t.Helper()
	w, err := mailworld.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("mailworld: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}
