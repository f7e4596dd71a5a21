package finder_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/verify"
)

// TestInternalMXNotContacted: with the default outbound policy (no
// allowance), a people world whose mail hosts are all on loopback gets no
// SMTP session: every person whose domain has mail servers is
// not_found/no_mail_server at once, without a probe, as a domain without
// mail is (docs/api.md).
func TestInternalMXNotContacted(t *testing.T) {
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 6, PerDomain: 3, RTT: -1, Seed: 5})
	w := startWorld(t, spec)
	v, err := verify.New(verify.Config{DNSServer: w.DNSAddr(), SMTPPort: w.SMTPPort(), CommandTimeout: 3 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := finder.New(v, nil)
	start := time.Now()
	res := f.Find(context.Background(), peopleOf(cases))
	el := time.Since(start)
	for i, c := range cases {
		r := res[i]
		want := finder.SubNoMailServer
		if c.Reason != "" {
			want = c.Reason // no_such_domain, null_mx: decided by DNS as before
		}
		if r.Status != finder.StatusNotFound || r.Substatus != want || r.ProbesUsed != 0 || r.Email != nil || r.Temporary {
			t.Errorf("%s %s @ %s: %s, want not_found/%s without probes", c.FirstName, c.LastName, c.Domain, describe(r), want)
		}
	}
	if n := w.Stats().Sessions; n != 0 {
		t.Fatalf("%d SMTP sessions with the loopback world", n)
	}
	if el > time.Second {
		t.Fatalf("the lookups took %v, want about the DNS answers' time", el)
	}
}
