package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// Issue 20, item 7, through the API: a bulk verification job's deliverable
// addresses teach the finder their domain's address shape (Redis), so a
// later bulk lookup on those domains tries the shape's pattern first and
// sends fewer RCPTs than the same lookup after the same verification with
// --finder-learn-from-verification=false. Each run is its own bulkd and
// Redis against one mail world.
func TestLookupLearnsFromVerification(t *testing.T) {
	w := startWorld(t, mailworld.Spec{
		RTT:   -1,
		Hosts: []mailworld.Host{{Name: "mx.fdot.test"}, {Name: "mx.under.test"}},
		Domains: []mailworld.Domain{
			{Name: "fdot.test", MX: []string{"mx.fdot.test"},
				Users: []string{"a.brown", "c.davis", "n.evans", "g.ford", "t.jackson", "m.wilson", "k.moore"}},
			{Name: "under.test", MX: []string{"mx.under.test"},
				Users: []string{"alice_brown", "carol_davis", "nora_evans", "thomas_jackson", "mary_wilson"}},
		},
	})
	verified := []string{"a.brown@fdot.test", "c.davis@fdot.test", "n.evans@fdot.test", "g.ford@fdot.test",
		"alice_brown@under.test", "carol_davis@under.test", "nora_evans@under.test"}
	people := []lookupIn{
		{FirstName: "Thomas", LastName: "Jackson", Domain: "fdot.test"},
		{FirstName: "Mary", LastName: "Wilson", Domain: "fdot.test"},
		{FirstName: "Kevin", LastName: "Moore", Domain: "fdot.test"},
		{FirstName: "Thomas", LastName: "Jackson", Domain: "under.test"},
		{FirstName: "Mary", LastName: "Wilson", Domain: "under.test"},
	}
	want := map[string]string{"Kevin Moore fdot.test": "k.moore@fdot.test",
		"Thomas Jackson fdot.test": "t.jackson@fdot.test", "Mary Wilson fdot.test": "m.wilson@fdot.test",
		"Thomas Jackson under.test": "thomas_jackson@under.test", "Mary Wilson under.test": "mary_wilson@under.test"}

	run := func(learn bool) int64 {
		env := companyStart(t, bulkdtest.WithConfig(func(c *config.Config) {
			c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
			c.OutboundAllowCIDRs = mailworld.AllowCIDRs
			c.SMTPCommandTimeout = 2 * time.Second
			c.VerifyRetryDelays = "1s"
			c.FinderLearnFromVerification = learn
		}))
		_, key := env.Account(credits.Whole(100))
		r := env.post(t, "/v1/bulk", key, map[string]any{"emails": verified})
		if r.Status != http.StatusOK {
			t.Fatalf("submit: %d %s", r.Status, r.Body)
		}
		var sub struct {
			JobID string `json:"job_id"`
		}
		r.Decode(t, &sub)
		bulkdtest.Eventually(t, 30*time.Second, 20*time.Millisecond, "verification complete", func() bool {
			st := map[string]any{}
			env.get(t, "/v1/bulk/"+sub.JobID, key).Decode(t, &st)
			return st["status"] == "complete"
		})
		before := w.Stats().Rcpts
		ls := env.lookupSubmit(t, lookupPath, key, people)
		env.lookupWait(t, lookupPath, key, ls.JobID)
		rcpts := w.Stats().Rcpts - before
		for _, row := range env.lookupResults(t, lookupPath, key, ls.JobID) {
			k := row.FirstName + " " + row.LastName + " " + row.Domain
			if row.Substatus != "verified" || row.Email == nil || *row.Email != want[k] {
				t.Errorf("learn=%v: %s: %s/%s %v, want verified %s", learn, k, row.Status, row.Substatus, row.Email, want[k])
			}
		}
		return rcpts
	}
	off, on := run(false), run(true)
	t.Logf("lookup of %d people after a verification job: %d RCPTs (probes included) without learning, %d with it", len(people), off, on)
	if on >= off {
		t.Errorf("%d RCPTs with learning, %d without", on, off)
	}
}
