package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apicontract"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/spamcheck"
	"github.com/bulkd/bulkd/internal/testspamd"
)

// withSpamd gives the API a spamd client of addr and the allowances
// (nil: the defaults).
func withSpamd(addr string, al spamcheck.Allowances) option {
	return withSpamEngine(&spamc.Client{Addr: addr, Timeout: 5 * time.Second, MaxConns: 4, Cooldown: 300 * time.Millisecond}, al)
}

func withSpamEngine(e apiserver.SpamEngine, al spamcheck.Allowances) option {
	if al == nil {
		al = spamcheck.DefaultAllowances()
	}
	return func(d *apiserver.Deps) { d.Spam = &apiserver.SpamCheck{Engine: e, Allowances: al} }
}

// A marketing email a sender might check, and a message SpamAssassin
// scores as spam.
const (
	hamCheck  = `{"subject":"Our November newsletter","from":"Shop News <news@shop.example.com>","text":"Hello Anna,\n\nhere is what is new in our shop this month: a new range of winter coats, and free delivery on orders over 50 euros until Sunday.\n\nSee you soon,\nThe Shop team\n","html":"<html><body><p>Hello Anna,</p><p>here is what is new in our shop this month: a new range of winter coats, and free delivery on orders over 50 euros until Sunday.</p><p>See you soon,<br>The Shop team</p></body></html>"}`
	spamCheck = `{"subject":"URGENT: You have won $1,000,000!","from":"WINNER <lottery@winner.example.com>","text":"Dear Friend,\n\nCONGRATULATIONS!!! You have WON $1,000,000 US DOLLARS in our international lottery.\nTo claim your prize send your bank account details, full name and phone number.\nThis is 100% risk free and guaranteed. Viagra cialis cheap meds no prescription.\nMake money fast, work from home, earn $5000 per week. Lose weight fast.\nDear beneficiary, we have been instructed by the World Bank to transfer the sum of US$10.5 Million.\n"}`
)

type spamAnswer struct {
	Score     float64 `json:"score"`
	Threshold float64 `json:"threshold"`
	IsSpam    bool    `json:"is_spam"`
	Rules     []struct {
		Name        string  `json:"name"`
		Score       float64 `json:"score"`
		Description string  `json:"description"`
	} `json:"rules"`
	FixFirst []struct {
		Rule   string  `json:"rule"`
		Score  float64 `json:"score"`
		Advice string  `json:"advice"`
	} `json:"fix_first"`
	Allowance struct {
		Limit     int64     `json:"limit"`
		Used      int64     `json:"used"`
		Remaining int64     `json:"remaining"`
		ResetAt   time.Time `json:"reset_at"`
	} `json:"allowance"`
}

func decodeSpam(t *testing.T, r response) spamAnswer {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	var a spamAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func nextMidnight(t time.Time) time.Time {
	d := t.UTC()
	return time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, time.UTC)
}

// Both key types get answers from a real spamd: a clean newsletter and a
// spam; built from parts and sent raw; every answer matches the OpenAPI
// document; the allowance is the account's plan's.
func TestSpamCheckAnswers(t *testing.T) {
	api := newTestAPI(t, withSpamd(testspamd.Start(t, 2).Addr, nil))
	oc := newOpenAPIChecker(t, api)
	now := api.Clock.Now()
	_, payg := api.account(credits.Whole(1), accounts.PayAsYouGo)
	_, unl := api.unlimitedAccount(accounts.PlanStandard, accounts.StateActive, now.Add(24*time.Hour))
	_, lapsed := api.unlimitedAccount(accounts.PlanStandard, accounts.StateLapsed, now.Add(24*time.Hour))
	post := func(body, key string) response {
		r := api.do(http.MethodPost, "/v1/content-spam-check", body, "X-API-Key", key)
		oc.check(http.MethodPost, api.URL+"/v1/content-spam-check", body, r)
		return r
	}

	ham := decodeSpam(t, post(hamCheck, payg))
	if ham.IsSpam || ham.Score >= 1 || ham.Threshold != 5 || len(ham.FixFirst) != 0 {
		t.Fatalf("newsletter: %+v", ham)
	}
	if a := ham.Allowance; a.Limit != 100 || a.Used != 1 || a.Remaining != 99 || !a.ResetAt.Equal(nextMidnight(now)) {
		t.Fatalf("pay-as-you-go allowance %+v", a)
	}

	spam := decodeSpam(t, post(spamCheck, unl))
	if !spam.IsSpam || spam.Score < spam.Threshold || len(spam.FixFirst) == 0 || len(spam.FixFirst) > 5 {
		t.Fatalf("spam: %+v", spam)
	}
	fired := map[string]float64{}
	for i, r := range spam.Rules {
		fired[r.Name] = r.Score
		if i > 0 && r.Score > spam.Rules[i-1].Score {
			t.Fatalf("rules not sorted by score: %+v", spam.Rules)
		}
	}
	for _, n := range []string{"DEAR_FRIEND", "DRUGS_ERECTILE"} {
		if fired[n] <= 0 {
			t.Errorf("%s did not fire: %+v", n, spam.Rules)
		}
	}
	if f := spam.FixFirst[0]; f.Rule != spam.Rules[0].Name || f.Advice == "" {
		t.Fatalf("fix_first %+v", spam.FixFirst)
	}
	if a := spam.Allowance; a.Limit != 500 || a.Used != 1 {
		t.Fatalf("standard plan allowance %+v", a)
	}
	// A lapsed plan's account has the pay-as-you-go allowance.
	if a := decodeSpam(t, post(hamCheck, lapsed)).Allowance; a.Limit != 100 {
		t.Fatalf("lapsed plan allowance %+v", a)
	}

	// The same spam, raw: the same verdict.
	raw, err := os.ReadFile("../internal/spamc/testdata/spam.eml")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"raw": string(raw)})
	rawAnswer := decodeSpam(t, post(string(body), payg))
	if !rawAnswer.IsSpam || rawAnswer.Allowance.Used != 2 {
		t.Fatalf("raw spam: %+v", rawAnswer)
	}
	// HTML only: SpamAssassin says so, and fix_first says what to do.
	htmlOnly := decodeSpam(t, post(`{"subject":"Hello","from":"news@shop.example.com","html":"<p>Hello Anna, our new collection is online.</p>"}`, payg))
	found := false
	for _, f := range htmlOnly.FixFirst {
		if f.Rule == "MIME_HTML_ONLY" && strings.Contains(f.Advice, "plain-text") {
			found = true
		}
	}
	if !found {
		t.Fatalf("HTML-only message: %+v", htmlOnly)
	}
	// Validation answers are documented too, and count nothing.
	for _, b := range []string{`{}`, `{"raw":"no headers here"}`, `{"text":"x","raw":"Subject: x\n\nx"}`, `{"from":"nobody","text":"x"}`} {
		r := post(b, payg)
		checkError(t, r, 422, "")
	}
	if used, _ := api.Billing.Used(context.Background(), accountOf(t, api, payg), billing.DailyWindow(spamcheck.WindowName, now)); used != 3 {
		t.Fatalf("used %d after 3 checks and 4 invalid requests", used)
	}
}

func accountOf(t *testing.T, api *testAPI, key string) string {
	t.Helper()
	p, err := api.Accounts.Authenticate(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return p.Account.ID
}

// The daily allowance is per account: shared by its keys and by every API
// replica (two servers on one Redis here), exact under concurrency; past
// it 429 daily_quota_exceeded with Retry-After to UTC midnight, nothing
// counted; a new UTC day starts from zero.
func TestSpamCheckDailyAllowance(t *testing.T) {
	sd := testspamd.Start(t, 2)
	al := spamcheck.Allowances{accounts.PlanNone: 5, accounts.PlanStarter: 7}
	api := newTestAPI(t, withSpamd(sd.Addr, al))
	// 30 s before a UTC midnight on the API's clock.
	day := time.Date(2031, 3, 14, 23, 59, 30, 0, time.UTC)
	api.Clock.Set(day)
	oc := newOpenAPIChecker(t, api)
	// A second replica: its own server, same Redis and clock.
	d2 := apiserver.Deps{Redis: api.Redis, Accounts: api.Accounts, Billing: api.Billing, Limiter: api.Server.Limiter,
		Logger: api.Server.Logger, Now: api.Clock.Now}
	withSpamd(sd.Addr, al)(&d2)
	replica := httptest.NewServer(apicontract.Serve(t, apiserver.New(d2)))
	t.Cleanup(replica.Close)

	acct, k1 := api.account(credits.Whole(1), accounts.PayAsYouGo)
	k2, _, err := api.Accounts.CreateKey(context.Background(), acct, accounts.Unlimited)
	if err != nil {
		t.Fatal(err)
	}
	_, other := api.account(credits.Whole(1), accounts.PayAsYouGo)

	// 12 concurrent checks over two keys and two replicas: exactly 5 pass.
	var mu sync.Mutex
	codes := map[int]int{}
	retry := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			base, key := api.URL, k1
			if i%2 == 1 {
				base = replica.URL
			}
			if i%3 == 0 {
				key = k2
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/content-spam-check", strings.NewReader(hamCheck))
			req.Header.Set("X-API-Key", key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			mu.Lock()
			codes[res.StatusCode]++
			if res.StatusCode == 429 {
				retry[res.Header.Get("Retry-After")]++
			}
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if codes[200] != 5 || codes[429] != 7 {
		t.Fatalf("codes %v, want 5 x 200 and 7 x 429", codes)
	}
	if len(retry) != 1 || retry["30"] != 7 {
		t.Fatalf("Retry-After %v, want 30 (seconds to UTC midnight)", retry)
	}
	r := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", k1)
	m := checkError(t, r, 429, "daily_quota_exceeded")
	if !strings.Contains(m["detail"].(string), "5 of 5") || r.Header.Get("Retry-After") != "30" {
		t.Fatalf("429: %s, Retry-After %s", r.Body, r.Header.Get("Retry-After"))
	}
	oc.check(http.MethodPost, api.URL+"/v1/content-spam-check", hamCheck, r)
	win := billing.DailyWindow(spamcheck.WindowName, day)
	if used, _ := api.Billing.Used(context.Background(), acct, win); used != 5 {
		t.Fatalf("used %d: a refused check counted", used)
	}
	// Another account has its own allowance.
	if a := decodeSpam(t, api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", other)).Allowance; a.Used != 1 || a.Limit != 5 {
		t.Fatalf("other account %+v", a)
	}
	// Past UTC midnight: a new allowance.
	api.Clock.Set(day.Add(31 * time.Second))
	a := decodeSpam(t, api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", k2)).Allowance
	if a.Used != 1 || a.Remaining != 4 || !a.ResetAt.Equal(time.Date(2031, 3, 16, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("next day %+v", a)
	}
	// The ledger shows each check under its own unit.
	entries, err := api.Billing.Entries(context.Background(), acct, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Unit == spamcheck.WindowName && e.Kind == billing.KindQuotaConsume {
			n++
		}
	}
	if n != 6 {
		t.Fatalf("%d spam_checks consumptions in the ledger, want 6: %+v", n, entries)
	}
}

// spamd down (stopped: refusing), or too slow (frozen): 503
// engine_unavailable, fast, with the allowance given back; the rest of
// the API answers as usual meanwhile; when spamd is back the checks
// succeed again by themselves.
func TestSpamCheckEngineUnavailable(t *testing.T) {
	sd := testspamd.Start(t, 1)
	engine := &spamc.Client{Addr: sd.Addr, Timeout: time.Second, MaxConns: 1, Cooldown: 500 * time.Millisecond}
	api := newTestAPI(t, withSpamEngine(engine, nil))
	oc := newOpenAPIChecker(t, api)
	acct, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	win := func() billing.Window { return billing.DailyWindow(spamcheck.WindowName, api.Clock.Now()) }
	post := func() (response, time.Duration) {
		t0 := time.Now()
		r := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key)
		return r, time.Since(t0)
	}
	used := func() int64 {
		n, err := api.Billing.Used(context.Background(), acct, win())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	unavailable := func(what string, within time.Duration) {
		t.Helper()
		for i := 0; i < 5; i++ {
			r, took := post()
			checkError(t, r, 503, "engine_unavailable")
			oc.check(http.MethodPost, api.URL+"/v1/content-spam-check", hamCheck, r)
			if took > within {
				t.Fatalf("%s: check %d took %v", what, i, took)
			}
			if n := used(); n != 1 {
				t.Fatalf("%s: %d checks used after a 503 (want the 1 good one)", what, n)
			}
			// Other endpoints are unaffected.
			t0 := time.Now()
			if r := api.get("/v1/credits", key); r.Status != 200 || time.Since(t0) > 200*time.Millisecond {
				t.Fatalf("%s: GET /v1/credits %d in %v", what, r.Status, time.Since(t0))
			}
		}
	}
	recovered := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, _ := post()
			if r.Status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no recovery within 20 s: %d %s", what, r.Status, r.Body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := used(); n != 2 {
			t.Fatalf("%s: %d used after recovery, want 2", what, n)
		}
		// Back to one used: the next phase counts from the same state.
		if err := api.Redis.Set(context.Background(), accounts.QuotaKey(acct, spamcheck.WindowName+":"+win().ID), 1, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}

	decodeSpam(t, api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key))

	sd.Stop()
	unavailable("spamd stopped", 500*time.Millisecond)
	if err := sd.Restart(); err != nil {
		t.Fatal(err)
	}
	recovered("spamd restarted")

	if err := sd.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Each answer within the 1 s timeout (plus slack for a busy machine);
	// after three, the breaker answers at once.
	unavailable("spamd frozen", 1500*time.Millisecond)
	if err := sd.Thaw(); err != nil {
		t.Fatal(err)
	}
	recovered("spamd thawed")
}

// No spamd configured (no spam check at all, or one without an engine):
// 503 engine_unavailable with either kind of key, and no allowance taken.
func TestSpamCheckNoEngine(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []option
	}{
		{"no spam check", nil},
		{"no engine", []option{withSpamEngine(nil, nil)}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			api := newTestAPI(t, tc.opts...)
			oc := newOpenAPIChecker(t, api)
			acct, payg := api.account(credits.Whole(1), accounts.PayAsYouGo)
			unl, _, err := api.Accounts.CreateKey(context.Background(), acct, accounts.Unlimited)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{payg, unl} {
				r := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key)
				checkError(t, r, 503, "engine_unavailable")
				oc.check(http.MethodPost, api.URL+"/v1/content-spam-check", hamCheck, r)
			}
			if used, err := api.Billing.Used(context.Background(), acct, billing.DailyWindow(spamcheck.WindowName, api.Clock.Now())); err != nil || used != 0 {
				t.Fatalf("used %d (%v) without an engine", used, err)
			}
		})
	}
}

// panicEngine fails the way a bug would.
type panicEngine struct{}

func (panicEngine) Report(context.Context, []byte) (*spamc.Result, error) { panic("engine bug") }

// A check that ends in a 500 gives its allowance back.
func TestSpamCheckReleasedOnInternalError(t *testing.T) {
	api := newTestAPI(t, withSpamEngine(panicEngine{}, nil))
	acct, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	checkError(t, api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key), 500, "")
	if used, _ := api.Billing.Used(context.Background(), acct, billing.DailyWindow(spamcheck.WindowName, api.Clock.Now())); used != 0 {
		t.Fatalf("used %d after a 500", used)
	}
}

// A retry with the same Idempotency-Key gets the first answer and does not
// take a second check.
func TestSpamCheckIdempotent(t *testing.T) {
	api := newTestAPI(t, withSpamd(testspamd.Start(t, 1).Addr, nil))
	acct, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	first := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key, "Idempotency-Key", "check-1")
	again := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key, "Idempotency-Key", "check-1")
	if first.Status != 200 || again.Status != 200 || string(first.Body) != string(again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, again %d (replayed %q)", first.Status, again.Status, again.Header.Get("Idempotent-Replayed"))
	}
	if used, _ := api.Billing.Used(context.Background(), acct, billing.DailyWindow(spamcheck.WindowName, api.Clock.Now())); used != 1 {
		t.Fatalf("used %d after a retry", used)
	}
	if r := api.do(http.MethodPost, "/v1/content-spam-check", hamCheck, "X-API-Key", key, "Idempotency-Key", "check-2"); decodeSpam(t, r).Allowance.Used != 2 {
		t.Fatalf("a new key: %s", r.Body)
	}
}
