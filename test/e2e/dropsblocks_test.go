package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// Issue 20, items 1 and 2, through the API: servers that drop the session
// after K RCPTs, and one that blocks the client's IP (DNSBL). Every dropped
// address gets its real verdict and is charged; every blocked one is
// unknown/blocked and refunded, in bulk and through GET /v1/verify; the
// block shows on /metrics.
func TestDropsAndBlocksCharged(t *testing.T) {
	w := startWorld(t, mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 30, Blocked: 10}))
	env := companyStart(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs
		c.SMTPCommandTimeout = time.Second
		c.VerifyRetryDelays = "1s"
	}))
	acct, key := env.Account(credits.Whole(100))
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	r := env.post(t, "/v1/bulk", key, map[string]any{"emails": emails})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	bulkdtest.Eventually(t, 30*time.Second, 20*time.Millisecond, "complete", func() bool {
		st := map[string]any{}
		env.get(t, "/v1/bulk/"+sub.JobID, key).Decode(t, &st)
		return st["status"] == "complete"
	})
	rows := verifyResults(t, env, key, sub.JobID)
	if len(rows) != len(emails) {
		t.Fatalf("%d rows for %d addresses", len(rows), len(emails))
	}
	blocked := 0
	for _, row := range rows {
		c, _ := w.Expect(row.Input)
		if row.Status != c.Status || row.Reason != c.Reason {
			t.Errorf("%s: %s/%s, want %s/%s", row.Input, row.Status, row.Reason, c.Status, c.Reason)
		}
		want := credits.Amount(200)
		if row.Status == "unknown" {
			want = 0
			blocked++
		}
		if row.CreditsConsumed != want {
			t.Errorf("%s (%s/%s): charged %v, want %v", row.Input, row.Status, row.Reason, row.CreditsConsumed, want)
		}
	}
	if blocked != 10 {
		t.Errorf("%d unknown rows, want the 10 blocked ones", blocked)
	}
	charged := credits.Amount(200 * (len(emails) - 10))
	if got := env.Balance(acct); got != credits.Whole(100)-charged {
		t.Errorf("balance %v, want %v (blocked refunded)", got, credits.Whole(100)-charged)
	}

	// The single check: the server is backed off, the answer is still
	// blocked (the block is shared through Redis), and it is free.
	before := env.Balance(acct)
	r = env.get(t, "/v1/verify?timeout=10&email=b01@blocked.test", key)
	var one map[string]any
	_ = json.Unmarshal(r.Body, &one)
	if r.Status != http.StatusOK || one["status"] != "unknown" || one["reason"] != "blocked" || one["credits_consumed"] != 0.0 {
		t.Errorf("GET /v1/verify of a blocked address: %d %s", r.Status, r.Body)
	}
	if got := env.Balance(acct); got != before {
		t.Errorf("balance %v after a blocked single check, want %v", got, before)
	}
	mfs, err := env.Parts.API.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "bulkd_smtp_blocks_total" {
			for _, m := range mf.GetMetric() {
				found = found || m.GetCounter().GetValue() > 0
			}
		}
	}
	if !found {
		t.Errorf("bulkd_smtp_blocks_total not counted on the /metrics registry")
	}
}
