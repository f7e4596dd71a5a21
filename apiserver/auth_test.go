package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testspamd"
)

// Each key family and key state against each endpoint family (SPEC section 5).
// The content spam check takes every valid key, whatever its family or
// plan state (SPEC 4.6), and answers from a real spamd.
func TestAuthMatrix(t *testing.T) {
	api := newTestAPI(t, withSpamd(testspamd.Start(t, 1).Addr, nil))
	ctx := context.Background()
	now := api.Clock.Now()

	_, payg := api.account(credits.Whole(5), accounts.PayAsYouGo)
	_, revoked := api.account(credits.Whole(5), accounts.PayAsYouGo)
	if err := api.Accounts.RevokeKey(ctx, accounts.KeyIDOf(revoked)); err != nil {
		t.Fatal(err)
	}
	_, active := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, now.Add(24*time.Hour))
	_, lapsed := api.unlimitedAccount(accounts.PlanStandard, accounts.StateLapsed, now.Add(24*time.Hour))
	_, expired := api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, now.Add(-time.Minute))
	_, noPlan := api.unlimitedAccount(accounts.PlanNone, "", time.Time{})
	wrongSecret := payg[:len(payg)-1] + "a" // same key id, different secret
	if strings.HasSuffix(payg, "a") {
		wrongSecret = payg[:len(payg)-1] + "b"
	}
	unknown := "bkd_AAAAAAAAAAAA_" + strings.Repeat("x", 40)

	type want struct{ credits, usage, spam int }
	const ok, spam = 200, 200
	cases := []struct {
		name    string
		headers []string
		want    want
		code    [3]string
	}{
		{"missing", nil, want{401, 401, 401}, [3]string{}},
		{"empty", []string{"X-API-Key", ""}, want{401, 401, 401}, [3]string{}},
		{"unknown", []string{"X-API-Key", unknown}, want{401, 401, 401}, [3]string{}},
		{"garbage", []string{"X-API-Key", "hello"}, want{401, 401, 401}, [3]string{}},
		{"wrong secret", []string{"X-API-Key", wrongSecret}, want{401, 401, 401}, [3]string{}},
		{"revoked", []string{"X-API-Key", revoked}, want{401, 401, 401}, [3]string{}},
		{"inner space", []string{"X-API-Key", payg[:10] + " " + payg[10:]}, want{401, 401, 401}, [3]string{}},
		{"nbsp padded", []string{"X-API-Key", payg + "\u00a0"}, want{401, 401, 401}, [3]string{}},
		{"quoted", []string{"X-API-Key", `"` + payg + `"`}, want{401, 401, 401}, [3]string{}},
		{"two headers", []string{"X-API-Key", payg, "X-API-Key", payg}, want{401, 401, 401}, [3]string{}},
		{"bearer instead", []string{"Authorization", "Bearer " + payg}, want{401, 401, 401}, [3]string{}},
		{"other header name", []string{"X-API-Token", payg}, want{401, 401, 401}, [3]string{}},
		{"payg", []string{"X-API-Key", payg}, want{ok, 403, spam}, [3]string{"", "wrong_key_plan", ""}},
		{"payg lowercase header", []string{"x-api-key", payg}, want{ok, 403, spam}, [3]string{"", "wrong_key_plan", ""}},
		{"unlimited active", []string{"X-API-Key", active}, want{403, ok, spam}, [3]string{"wrong_key_plan", "", ""}},
		{"unlimited lapsed", []string{"X-API-Key", lapsed}, want{403, 402, spam}, [3]string{"wrong_key_plan", "subscription_inactive", ""}},
		{"unlimited period over", []string{"X-API-Key", expired}, want{403, 402, spam}, [3]string{"wrong_key_plan", "subscription_inactive", ""}},
		{"unlimited no plan", []string{"X-API-Key", noPlan}, want{403, 402, spam}, [3]string{"wrong_key_plan", "subscription_inactive", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := []response{
				api.do(http.MethodGet, "/v1/credits", "", c.headers...),
				api.do(http.MethodGet, "/v1/unlimited/usage", "", c.headers...),
				api.do(http.MethodPost, "/v1/content-spam-check", `{"subject":"Hello","text":"Hi Anna, see you on Monday."}`, c.headers...),
			}
			for i, w := range []int{c.want.credits, c.want.usage, c.want.spam} {
				r := rs[i]
				if w == ok {
					if r.Status != 200 {
						t.Fatalf("route %d: status %d: %s", i, r.Status, r.Body)
					}
				} else {
					m := checkError(t, r, w, c.code[i])
					if w == 401 && m["detail"] != "An API key is required in the X-API-Key header." {
						t.Fatalf("401 detail %q", m["detail"])
					}
				}
				// Rate-limit headers on every authenticated answer, none on a 401.
				has := r.Header.Get("X-RateLimit-Limit") != ""
				if has != (w != 401) {
					t.Fatalf("route %d status %d: X-RateLimit-Limit present=%v", i, r.Status, has)
				}
			}
		})
	}

	// Revoking works at once, reinstating a lapsed plan works at once.
	id, key := api.unlimitedAccount(accounts.PlanProfessional, accounts.StateLapsed, now.Add(time.Hour))
	checkError(t, api.get("/v1/unlimited/usage", key), 402, "subscription_inactive")
	if err := api.Accounts.SetPlan(ctx, id, accounts.PlanProfessional, accounts.StateActive, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := api.get("/v1/unlimited/usage", key); r.Status != 200 {
		t.Fatalf("reinstated: %d %s", r.Status, r.Body)
	}
	if err := api.Accounts.RevokeKey(ctx, "bkd_"+accounts.KeyIDOf(key)); err != nil {
		t.Fatal(err)
	}
	checkError(t, api.get("/v1/unlimited/usage", key), 401, "")
}

func TestCreditsAndUsage(t *testing.T) {
	api := newTestAPI(t)
	acct, key := api.account(12400, accounts.PayAsYouGo)
	r := api.get("/v1/credits", key)
	if r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"credits":12.4,"user_id":"`+acct+`"}` {
		t.Fatalf("credits: %d %s", r.Status, r.Body)
	}

	api.Clock.Set(time.Date(2026, 3, 9, 15, 0, 0, 0, time.UTC))
	pe := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	uid, ukey := api.unlimitedAccount(accounts.PlanStandard, accounts.StateActive, pe)
	m := api.get("/v1/unlimited/usage", ukey).JSON(t)
	if m["bulk_searches_reset_at"] != "2026-03-10T00:00:00Z" || m["current_period_end"] != "2026-04-01T00:00:00Z" ||
		m["bulk_searches_limit"] != float64(30000) || m["bulk_searches_remaining"] != float64(30000) || m["plan"] != "standard" ||
		m["bulk_searches_used"] != float64(0) || m["single_lookups_used"] != float64(0) || m["single_lookups_limit"] != float64(60000) {
		t.Fatalf("usage %v", m)
	}
	// Use read back: today's bulk searches and the period's single lookups,
	// each from its own window.
	ctx := context.Background()
	for _, c := range []billing.Consumption{
		{AccountID: uid, ChargeID: "job-1", Window: billing.DailyWindow(billing.BulkSearches, api.Clock.Now()), N: 120, Limit: 30000},
		{AccountID: uid, ChargeID: "job-0", Window: billing.DailyWindow(billing.BulkSearches, api.Clock.Now().AddDate(0, 0, -1)), N: 5000, Limit: 30000},
		{AccountID: uid, ChargeID: "single-1", Window: billing.PeriodWindow(billing.SingleLookups, pe), N: 7, Limit: 60000},
	} {
		if _, err := api.Billing.Consume(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	m = api.get("/v1/unlimited/usage", ukey).JSON(t)
	if m["bulk_searches_used"] != float64(120) || m["bulk_searches_remaining"] != float64(29880) || m["single_lookups_used"] != float64(7) {
		t.Fatalf("usage after use %v", m)
	}
	// SPEC section 8's daily bulk quotas (and our monthly single-lookup
	// caps) per plan; a plan with no billing period has a null period end.
	for _, c := range []struct {
		plan          accounts.Plan
		daily, single float64
		periodEnd     time.Time
	}{
		{accounts.PlanStarter, 10000, 20000, pe},
		{accounts.PlanProfessional, 75000, 150000, time.Time{}},
	} {
		_, k := api.unlimitedAccount(c.plan, accounts.StateActive, c.periodEnd)
		m := api.get("/v1/unlimited/usage", k).JSON(t)
		if m["plan"] != string(c.plan) || m["bulk_searches_limit"] != c.daily || m["bulk_searches_remaining"] != c.daily ||
			m["single_lookups_limit"] != c.single || (c.periodEnd.IsZero() != (m["current_period_end"] == nil)) {
			t.Fatalf("%s usage %v", c.plan, m)
		}
	}
}

// /metrics exposes requests by route pattern (never raw paths), latency,
// auth failures and rate-limit rejections. It is served by MetricsHandler
// (on --metrics-listen), not by the API's router.
func TestMetricsEndpoint(t *testing.T) {
	api := newTestAPI(t, withRateLimit(1))
	_, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	api.get("/v1/credits", key)
	api.get("/v1/credits", key) // over the limit of 1/s
	api.get("/v1/credits", "")
	body := api.metrics()
	for _, want := range []string{
		`bulkd_http_requests_total{method="GET",route="/v1/credits",status="200"} 1`,
		`bulkd_http_requests_total{method="GET",route="/v1/credits",status="429"} 1`,
		`bulkd_http_request_duration_seconds_bucket{method="GET",route="/v1/credits"`,
		`bulkd_rate_limit_rejections_total 1`,
		`bulkd_auth_failures_total 1`,
		`bulkd_credits_charged_total`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Not on the API's own address.
	checkError(t, api.do("GET", "/metrics", ""), 404, "")
}

// TestMetricsLabelsAreBounded is issue 18's item 4: the request metrics'
// labels take only values bulkd chooses. 100 unauthenticated requests with
// made-up methods and paths, after one of each kind, add no line to
// /metrics (before, each new method added a counter and a histogram: 100
// grew /metrics from 262 to 2,080 lines); routes are labelled by their
// pattern, whatever the path's ids, and what no route takes is
// "unmatched".
func TestMetricsLabelsAreBounded(t *testing.T) {
	api := newTestAPI(t)
	_, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	junk := func(i int) {
		for _, path := range []string{"/v1/credits", fmt.Sprintf("/v1/nothing-%d", i), fmt.Sprintf("/x%d", i),
			"/v1/company-enrichment/bulk/" + uuid.NewString()} {
			api.do(fmt.Sprintf("MADEUP%d", i), path, "")
		}
		api.do(http.MethodGet, fmt.Sprintf("/v1/nothing-%d/deeper", i), "", "X-API-Key", key)
		api.do(http.MethodPut, "/v1/credits", "", "X-API-Key", key)                                        // 405
		api.do(http.MethodGet, fmt.Sprintf("/v1/company-enrichment/bulk/job-%d", i), "", "X-API-Key", key) // 422
	}
	junk(0)
	before := api.metrics()
	for i := 1; i <= 100; i++ {
		junk(i)
	}
	after := api.metrics()
	if b, a := strings.Count(before, "\n"), strings.Count(after, "\n"); a != b {
		t.Errorf("/metrics grew from %d to %d lines with 100 made-up methods and paths", b, a)
	}
	for _, want := range []string{
		`bulkd_http_requests_total{method="OTHER",route="unmatched",status="405"}`,
		`bulkd_http_requests_total{method="GET",route="unmatched",status="404"} 101`,
		`bulkd_http_requests_total{method="PUT",route="unmatched",status="405"} 101`,
		`bulkd_http_requests_total{method="GET",route="/v1/company-enrichment/bulk/{job_id}",status="422"} 101`,
	} {
		if !strings.Contains(after, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, bad := range []string{"MADEUP", "nothing-", `route="/x`, "job-"} {
		if strings.Contains(after, bad) {
			t.Errorf("a client's %q made it into /metrics", bad)
		}
	}
}
