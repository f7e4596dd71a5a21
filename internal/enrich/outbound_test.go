package enrich

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/company/redirect"
	"github.com/bulkd/bulkd/internal/company/redirect/redirecttest"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testredis"
)

// TestRefusedDomainRowsAnswerNoRedirect: with the default outbound policy,
// domain rows whose names resolve inside (loopback, the metadata address,
// a private one, public and loopback) are answered at once exactly as a
// site that cannot be reached: no redirect, the company's data as usual.
// (internal/company/redirect's TestInternalDomainGetsNoRequest counts the
// connections: none.)
func TestRefusedDomainRowsAnswerNoRedirect(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	inside := map[string][]string{
		"loop.example": {"127.0.0.1"}, "meta.example": {"169.254.169.254"}, "lan.example": {"10.1.2.3"},
		"mixed.example": {"93.184.216.34", "127.0.0.1"},
	}
	d := redirecttest.StartDNS(t, func(name string) redirecttest.Answer {
		if a, ok := inside[strings.TrimPrefix(name, "www.")]; ok {
			return redirecttest.Answer{A: a}
		}
		return redirecttest.NXDomain
	})
	rdb, _ := testredis.Client(t)
	store := company.NewStore(rdb, "bulkd:")
	ctx := context.Background()
	if _, err := company.Import(ctx, strings.NewReader(`{"name":"Inside Co","website":"https://loop.example"}`+"\n"),
		company.FormatJSONL, store, normalize.New(normalize.DefaultHosts), nil); err != nil {
		t.Fatal(err)
	}
	a := &Answerer{Store: store,
		Redirects: redirect.NewChecker(outbound.Config{DNSServer: d.Addr, Timeout: 2 * time.Second}, redirect.Options{})}
	payloads := []string{normalize.KeyDomain + "loop.example", normalize.KeyDomain + "meta.example",
		normalize.KeyDomain + "lan.example", normalize.KeyDomain + "mixed.example"}
	start := time.Now()
	answers, err := a.Answer(ctx, payloads)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("refused domains answered after %v, want at once", el)
	}
	for i, ans := range answers {
		want := jobs.OutcomeNotFound
		if i == 0 {
			want = jobs.OutcomeFound
		}
		if ans.Outcome != want || !strings.Contains(string(ans.Data), `"is_redirect":false,"redirected_to":null`) {
			t.Errorf("%s: %s %s; want %s without a redirect", payloads[i], ans.Outcome, ans.Data, want)
		}
		if want == jobs.OutcomeNotFound && string(ans.Data) != emptyData {
			t.Errorf("%s: data %s, want %s", payloads[i], ans.Data, emptyData)
		}
	}
}
