package e2e

// The outbound policy end to end (docs/security.md): a standalone bulkd with
// the defaults (no --outbound-allow-cidrs) pointed at the mail world, whose
// hosts are all on loopback, opens no SMTP session on a customer's behalf.

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// loopbackSMTP listens on addr and answers like an accommodating mail
// server (every command 250), counting the sessions it gets.
func loopbackSMTP(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = c.Write([]byte("220 inside ESMTP\r\n"))
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if sc.Text() == "QUIT" {
						_, _ = c.Write([]byte("221 bye\r\n"))
						return
					}
					_, _ = c.Write([]byte("250 ok\r\n"))
				}
			}()
		}
	}()
	return &n
}

// TestVerifyRefusesInternalAddresses: GET /v1/verify with an address
// literal naming loopback (a real SMTP server listens there and counts
// sessions) or a domain whose MX hosts are on loopback answers
// undeliverable/no_mail_server at once, without any SMTP session, and is
// charged as a verdict (0.2); a bulk job of such addresses completes the
// same way. The answers are checked against the served OpenAPI document.
func TestVerifyRefusesInternalAddresses(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{}))
	inside := loopbackSMTP(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(w.SMTPPort())))
	env := companyStart(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = "" // the default: public addresses only
		c.SMTPCommandTimeout = 3 * time.Second
	}))
	acct, key := env.Account(credits.Whole(10))
	emails := []string{"a@[127.0.0.1]", "alice@[" + w.HostIP("mx.ok.test") + "]", "alice@ok.test", "alice@tarpit.test"}
	for _, e := range emails {
		start := time.Now()
		r := env.get(t, "/v1/verify?timeout=10&email="+url.QueryEscape(e), key)
		el := time.Since(start)
		var got struct {
			Status          string         `json:"status"`
			Reason          string         `json:"reason"`
			MXHost          *string        `json:"mx_host"`
			SMTPCode        *int           `json:"smtp_code"`
			CreditsConsumed credits.Amount `json:"credits_consumed"`
		}
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", e, r.Status, r.Body)
		}
		r.Decode(t, &got)
		if got.Status != "undeliverable" || got.Reason != "no_mail_server" || got.SMTPCode != nil || got.CreditsConsumed != 200 {
			t.Errorf("%s: %s", e, r.Body)
		}
		// The tarpit would hold a session for the 3 s command timeout.
		if el > time.Second {
			t.Errorf("%s: answered after %v, want at once", e, el)
		}
	}
	if n := inside.Load(); n != 0 {
		t.Fatalf("the SMTP server on 127.0.0.1 got %d sessions", n)
	}
	if s := w.Stats(); s.Sessions != 0 {
		t.Fatalf("the loopback mail world got %d sessions", s.Sessions)
	}
	if got := env.Balance(acct); got != credits.Whole(10)-credits.Amount(200*len(emails)) {
		t.Fatalf("balance %v: each verdict charged 0.2", got)
	}

	// Bulk: the same verdicts, charged, nothing refunded.
	r := env.post(t, "/v1/bulk", key, map[string]any{"emails": emails})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	bulkdtest.Eventually(t, 20*time.Second, 20*time.Millisecond, "complete", func() bool {
		st := map[string]any{}
		_ = json.Unmarshal(env.get(t, "/v1/bulk/"+sub.JobID, key).Body, &st)
		return st["status"] == "complete"
	})
	for _, row := range verifyResults(t, env, key, sub.JobID) {
		if row.Status != "undeliverable" || row.Reason != "no_mail_server" || row.CreditsConsumed != 200 {
			t.Errorf("bulk %s: %+v", row.Input, row)
		}
	}
	if inside.Load() != 0 || w.Stats().Sessions != 0 {
		t.Fatal("the bulk job opened SMTP sessions inside")
	}
}
