package enrich

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/company/redirect"
	"github.com/bulkd/bulkd/internal/company/redirect/redirecttest"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testredis"
)

// TestDeadDomainsBatch answers a batch of domain rows whose domains do not
// exist, with the redirect checks on and no proxy (bulkd resolves the names
// itself, through a real DNS server on loopback). Every row answers as it
// always did (not_found, no redirect), each domain costs one DNS question,
// and the questions run far more in parallel than the website fetches'
// bound (Concurrency 2). Before the DNS probe, each dead domain cost four
// questions (A and AAAA for http, again for https) and the checks ran two
// at a time.
func TestDeadDomainsBatch(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	d := redirecttest.StartDNS(t, func(name string) redirecttest.Answer {
		if name == "servfail.example" {
			return redirecttest.Answer{Rcode: dns.RcodeServerFailure}
		}
		return redirecttest.NXDomain
	})
	rdb, _ := testredis.Client(t)
	store := company.NewStore(rdb, "bulkd:")
	ctx := context.Background()
	if _, err := company.Import(ctx, strings.NewReader(`{"name":"Known","website":"https://gone-3.example"}`+"\n"),
		company.FormatJSONL, store, normalize.New(normalize.DefaultHosts), nil); err != nil {
		t.Fatal(err)
	}
	a := &Answerer{Store: store, Concurrency: 2,
		Redirects: redirect.NewChecker(outbound.Config{DNSServer: d.Addr, Timeout: 2 * time.Second}, redirect.Options{})}

	var payloads []string
	for i := range 200 {
		payloads = append(payloads, fmt.Sprintf("%sgone-%d.example", normalize.KeyDomain, i))
	}
	payloads = append(payloads, normalize.KeyDomain+"servfail.example")
	reached := d.GateAt(64, time.Second)
	answers, err := a.Answer(ctx, payloads)
	if err != nil {
		t.Fatal(err)
	}
	if !reached() {
		_, most := d.InFlight()
		t.Errorf("at most %d DNS questions at once: the dead domains waited for the website fetches' bound", most)
	}
	for i, ans := range answers {
		want := jobs.OutcomeNotFound
		if i == 3 {
			want = jobs.OutcomeFound // a known company on a dead domain is still found
		}
		if ans.Outcome != want {
			t.Fatalf("%s: outcome %s, want %s", payloads[i], ans.Outcome, want)
		}
		if want == jobs.OutcomeNotFound && string(ans.Data) != emptyData {
			t.Fatalf("%s: data %s, want %s", payloads[i], ans.Data, emptyData)
		}
		if !strings.Contains(string(ans.Data), `"is_redirect":false,"redirected_to":null`) {
			t.Fatalf("%s: data %s: want no redirect", payloads[i], ans.Data)
		}
	}
	for _, name := range []string{"gone-0.example", "gone-3.example", "gone-199.example"} {
		if a, aaaa := d.Questions(name, dns.TypeA), d.Questions(name, dns.TypeAAAA); a != 1 || aaaa != 0 {
			t.Errorf("%s: %d A and %d AAAA questions, want one A", name, a, aaaa)
		}
	}
	if d.Questions("servfail.example", dns.TypeA) < 2 {
		t.Errorf("servfail.example: the HTTP stage did not look it up after the probe's SERVFAIL")
	}
}
