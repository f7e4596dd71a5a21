package verify_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/testsocks"
	"github.com/bulkd/bulkd/internal/verify"
)

// egressWorld is one domain with three mailboxes on one server; blockIPs
// are the client addresses its DNSBL lists.
func egressWorld(t *testing.T, blockIPs ...string) *mailworld.World {
	return startWorld(t, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.egress.test", BlockClientIPs: blockIPs}},
		Domains: []mailworld.Domain{{Name: "egress.test", MX: []string{"mx.egress.test"},
			Users: []string{"ann", "bob"}}},
	})
}

var egressEmails = []string{"ann@egress.test", "bob@egress.test", "nobody@egress.test"}

// checkEgressAnswers asserts the world's truth: two deliverable, one
// undeliverable.
func checkEgressAnswers(t *testing.T, res []verify.Result) {
	t.Helper()
	want := []string{verify.StatusDeliverable, verify.StatusDeliverable, verify.StatusUndeliverable}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("%s: %s/%s, want %s", r.Email, r.Status, r.Reason, want[i])
		}
	}
}

// TestEgressThroughSOCKS5: sessions go through a real SOCKS5 proxy with
// user/password authentication; the proxy is asked to CONNECT to the
// checked IP literal (never a name), the server sees the proxy's address
// and the egress's HELO name, and the answers are the world's truth.
func TestEgressThroughSOCKS5(t *testing.T) {
	w := egressWorld(t)
	px := testsocks.Start(t, testsocks.Options{User: "bulkd", Password: "s3cr;et", Source: netip.MustParseAddr("127.0.0.9")})
	u, err := url.Parse("socks5://bulkd:" + url.QueryEscape("s3cr;et") + "@" + px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := worldConfig(w)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Egresses = []egress.Egress{{Name: "px", Helo: "out.proxy.test", Proxy: u}}
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkEgressAnswers(t, v.Verify(context.Background(), egressEmails))
	cs := px.Connects()
	if len(cs) == 0 {
		t.Fatal("the proxy saw no CONNECT")
	}
	mx := w.HostIP("mx.egress.test")
	for _, c := range cs {
		if c.Name || c.Target != fmt.Sprintf("%s:%d", mx, w.SMTPPort()) {
			t.Errorf("CONNECT %+v, want the checked address literal %s", c, mx)
		}
	}
	seen := w.Clients("mx.egress.test")
	if len(seen) != 1 || seen[mailworld.Client{IP: "127.0.0.9", Helo: "out.proxy.test"}] == 0 {
		t.Errorf("the server saw %v, want only 127.0.0.9 greeting as out.proxy.test", seen)
	}
	if strings.Contains(logs.String(), "s3cr") {
		t.Errorf("a log line carries the proxy password: %s", logs.String())
	}
}

// TestEgressProxyRefusesInternalTargets: the outbound policy applies to
// what the proxy is asked to reach: without the loopback allowance the
// world's MX gets no CONNECT at all.
func TestEgressProxyRefusesInternalTargets(t *testing.T) {
	w := egressWorld(t)
	px := testsocks.Start(t, testsocks.Options{})
	cfg := worldConfig(w)
	cfg.Policy = nil // public addresses only
	cfg.Egresses = []egress.Egress{{Name: "px", Helo: "out.proxy.test", Proxy: &url.URL{Scheme: "socks5", Host: px.Addr}}}
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Verify(context.Background(), egressEmails) {
		if r.Reason != verify.ReasonNoMailServer {
			t.Errorf("%s: %s/%s, want undeliverable/no_mail_server", r.Email, r.Status, r.Reason)
		}
	}
	if n := len(px.Connects()); n != 0 {
		t.Errorf("the proxy was asked %d CONNECTs, want 0", n)
	}
}

// TestEgressProxyFailureUsesAnotherEgress: an egress whose proxy refuses
// our credentials is set aside (a warning without the password) and the
// other egress answers.
func TestEgressProxyFailureUsesAnotherEgress(t *testing.T) {
	w, emails := srcWorld(t)
	px := testsocks.Start(t, testsocks.Options{User: "bulkd", Password: "right"})
	var logs bytes.Buffer
	cfg := worldConfig(w)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Egresses = []egress.Egress{
		{Name: "bad", Helo: "bad.proxy.test", Proxy: &url.URL{Scheme: "socks5", Host: px.Addr, User: url.UserPassword("bulkd", "wrongpass")}},
		{Name: "direct", Helo: "direct.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
	}
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Verify(context.Background(), emails) {
		if r.Status != verify.StatusDeliverable {
			t.Errorf("%s: %s/%s", r.Email, r.Status, r.Reason)
		}
	}
	if px.AuthFailures() == 0 {
		t.Fatal("no session tried the proxy: the test does not test")
	}
	if !strings.Contains(logs.String(), "proxy failed") || strings.Contains(logs.String(), "wrongpass") {
		t.Errorf("want a warning about the proxy without its password, got: %s", logs.String())
	}
}

// srcWorld is six domains on six servers, one mailbox each.
func srcWorld(t *testing.T) (*mailworld.World, []string) {
	spec := mailworld.Spec{}
	var emails []string
	for i := range 6 {
		d := fmt.Sprintf("src%d.test", i)
		spec.Hosts = append(spec.Hosts, mailworld.Host{Name: "mx." + d})
		spec.Domains = append(spec.Domains, mailworld.Domain{Name: d, MX: []string{"mx." + d}, Users: []string{"ann"}})
		emails = append(emails, "ann@"+d)
	}
	return startWorld(t, spec), emails
}

// TestEgressSourceIPs: two egresses bound to their own loopback source
// addresses, each greeting with its own name; the server sees both.
func TestEgressSourceIPs(t *testing.T) {
	w, emails := srcWorld(t)
	cfg := worldConfig(w)
	cfg.Egresses = []egress.Egress{
		{Name: "a", Helo: "a.egress.test", Source: netip.MustParseAddr("127.0.0.2")},
		{Name: "b", Helo: "b.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
	}
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Verify(context.Background(), emails) {
		if r.Status != verify.StatusDeliverable {
			t.Errorf("%s: %s/%s", r.Email, r.Status, r.Reason)
		}
	}
	byClient := map[mailworld.Client]int{}
	for i := range 6 {
		for c, n := range w.Clients(fmt.Sprintf("mx.src%d.test", i)) {
			byClient[c] += n
		}
	}
	for c := range byClient {
		ok := c == (mailworld.Client{IP: "127.0.0.2", Helo: "a.egress.test"}) || c == (mailworld.Client{IP: "127.0.0.3", Helo: "b.egress.test"})
		if !ok {
			t.Errorf("a server saw %+v: an egress's HELO from another egress's address", c)
		}
	}
	if len(byClient) != 2 {
		t.Errorf("clients seen %v, want both egresses used across the hosts", byClient)
	}
}

// TestBlockedEgressSetAside: a server whose DNSBL lists one egress's
// address blocks it; that egress is set aside for the server (a warning,
// the counter) and the other egress gets the real answers. A second
// process sharing the Redis limiter does not try the blocked egress on
// that server at all. With both egresses listed, the answer is
// unknown/blocked, refunded as before.
func TestBlockedEgressSetAside(t *testing.T) {
	w := egressWorld(t, "127.0.0.2")
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	egs := []egress.Egress{
		{Name: "a", Helo: "a.egress.test", Source: netip.MustParseAddr("127.0.0.2")},
		{Name: "b", Helo: "b.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
	}
	var logs bytes.Buffer
	cfg := worldConfig(w)
	cfg.Egresses = egs
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	v, err := verify.New(cfg, nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	// Force the first session onto the listed egress: a alone first.
	cfgA := cfg
	cfgA.Egresses = egs[:1]
	va, err := verify.New(cfgA, nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range va.Verify(context.Background(), egressEmails) {
		if r.Status != verify.StatusUnknown || r.Reason != verify.ReasonBlocked {
			t.Errorf("egress a alone: %s: %s/%s, want unknown/blocked", r.Email, r.Status, r.Reason)
		}
	}
	if !strings.Contains(logs.String(), "blocks this egress") || !strings.Contains(logs.String(), "egress=a") {
		t.Errorf("want a warning naming the blocked egress, got: %s", logs.String())
	}
	blocksBefore := w.Stats().PerHost["mx.egress.test"].Blocks
	if blocksBefore == 0 {
		t.Fatal("the world blocked nothing: the test does not test")
	}
	// Now both egresses: a is set aside for the server through Redis, b
	// answers.
	checkEgressAnswers(t, v.Verify(context.Background(), egressEmails))
	if b := w.Stats().PerHost["mx.egress.test"].Blocks; b != blocksBefore {
		t.Errorf("%d more blocks: the blocked egress was tried again within its back-off", b-blocksBefore)
	}
	seen := w.Clients("mx.egress.test")
	if seen[mailworld.Client{IP: "127.0.0.3", Helo: "b.egress.test"}] == 0 {
		t.Errorf("egress b never greeted the server: %v", seen)
	}

	// In one call, with nothing known yet: the server lists a (then b);
	// whichever egress the call starts with, every address gets its truth,
	// and in one of the two worlds the listed egress went first.
	var firstBlocked int64
	for _, listed := range []string{"127.0.0.2", "127.0.0.3"} {
		wl := egressWorld(t, listed)
		cfgl := worldConfig(wl)
		cfgl.Egresses = egs
		cfgl.Logger = cfg.Logger
		vl, err := verify.New(cfgl, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkEgressAnswers(t, vl.Verify(context.Background(), egressEmails))
		firstBlocked += wl.Stats().PerHost["mx.egress.test"].Blocks
	}
	if firstBlocked == 0 {
		t.Error("neither world blocked a session: the set-aside within one call was not tested")
	}
	logs.Reset()

	// Both listed: unknown/blocked, temporary (refunded).
	w2 := egressWorld(t, "127.0.0.2", "127.0.0.3")
	cfg2 := worldConfig(w2)
	cfg2.Egresses = egs
	cfg2.Logger = cfg.Logger
	v3, err := verify.New(cfg2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v3.Verify(context.Background(), egressEmails) {
		if r.Status != verify.StatusUnknown || r.Reason != verify.ReasonBlocked || !r.Temporary {
			t.Errorf("every egress blocked: %s: %s/%s temporary=%v, want unknown/blocked temporary", r.Email, r.Status, r.Reason, r.Temporary)
		}
	}
	if !strings.Contains(logs.String(), "egress=a") || !strings.Contains(logs.String(), "egress=b") {
		t.Errorf("want a block warning naming each egress, got: %s", logs.String())
	}
	if n := w2.Stats().PerHost["mx.egress.test"].Sessions; n > 4 {
		t.Errorf("%d sessions to a server that blocks every egress, want at most 2 per egress", n)
	}
}

// TestSessionCapPerEgress: the session cap is per (egress, server): with
// a cap of 1 and two egresses a server sees at most one session from each
// address, two at once in all, and never a 421.
func TestSessionCapPerEgress(t *testing.T) {
	var users []string
	var emails []string
	for i := range 40 {
		users = append(users, fmt.Sprintf("u%d", i))
		emails = append(emails, fmt.Sprintf("u%d@cap.test", i))
	}
	w := startWorld(t, mailworld.Spec{
		RTT:     15 * time.Millisecond,
		Hosts:   []mailworld.Host{{Name: "mx.cap.test", MaxConns: 2}},
		Domains: []mailworld.Domain{{Name: "cap.test", MX: []string{"mx.cap.test"}, Users: users}},
	})
	cfg := worldConfig(w)
	cfg.MaxRcptsPerSession = 5
	cfg.Egresses = []egress.Egress{
		{Name: "a", Helo: "a.egress.test", Source: netip.MustParseAddr("127.0.0.2")},
		{Name: "b", Helo: "b.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
	}
	v, err := verify.New(cfg, nil, verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 1, SessionsPerSecond: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Verify(context.Background(), emails) {
		if r.Status != verify.StatusDeliverable {
			t.Errorf("%s: %s/%s", r.Email, r.Status, r.Reason)
		}
	}
	hs := w.Stats().PerHost["mx.cap.test"]
	if hs.MaxConcurrent != 2 || hs.Rejected421 != 0 {
		t.Errorf("the server saw %d sessions at once and %d 421s, want 2 (one per egress) and none", hs.MaxConcurrent, hs.Rejected421)
	}
	if n := len(w.Clients("mx.cap.test")); n != 2 {
		t.Errorf("%d clients greeted, want both egresses", n)
	}
}

// TestSharedServersPerEgress: the two halves of issue 20's politeness
// together. 20 tenants' MX names resolve to a pool of two shared servers;
// two egresses (source addresses) each have a cap of 3 sessions per server
// address, so a server sees at most 6 at once (its own limit: more would
// be refused with 421) and both egresses at both servers. The first server
// lists egress a (a DNSBL): a is set aside for the names that led there and
// b carries their work, so every answer is still the world's truth.
func TestSharedServersPerEgress(t *testing.T) {
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 20, PerTenant: 10, Servers: 2, Pool: 2,
		MaxConnsPerServer: 6, RTT: 20 * time.Millisecond, Seed: 7})
	srv1, srv2 := "srv1."+mailworld.SharedMXSuffix, "srv2."+mailworld.SharedMXSuffix
	spec.Hosts[0].BlockClientIPs = []string{"127.0.0.2"}
	w := startWorld(t, spec)
	cases := w.Cases()
	cfg := worldConfig(w)
	// Few RCPTs per session: many sessions per name, so both egresses
	// reach both servers (with one session per name, sessions of b could
	// carry all of the first server's work before a ever asked there).
	cfg.MaxRcptsPerSession = 3
	cfg.Egresses = []egress.Egress{
		{Name: "a", Helo: "a.egress.test", Source: netip.MustParseAddr("127.0.0.2")},
		{Name: "b", Helo: "b.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
	}
	v, err := verify.New(cfg, nil, verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	checkExact(t, cases, v.Verify(context.Background(), emailsOf(cases)))
	st := w.Stats()
	for _, name := range []string{srv1, srv2} {
		hs := st.PerIP[w.HostIP(name)]
		if hs.Sessions == 0 || hs.MaxConcurrent > 6 || hs.Rejected421 != 0 {
			t.Errorf("%s: %d sessions, %d at once, %d refused with 421 (want some, at most 6, none)", name, hs.Sessions, hs.MaxConcurrent, hs.Rejected421)
		}
		t.Logf("%s: %d sessions, at most %d at once", name, hs.Sessions, hs.MaxConcurrent)
	}
	if st.PerHost[srv1].Blocks == 0 {
		t.Error("the first server blocked nothing: the test does not test")
	}
	b := mailworld.Client{IP: "127.0.0.3", Helo: "b.egress.test"}
	for _, name := range []string{srv1, srv2} {
		if w.Clients(name)[b] == 0 {
			t.Errorf("egress b never greeted %s: %v", name, w.Clients(name))
		}
	}
	if a := (mailworld.Client{IP: "127.0.0.2", Helo: "a.egress.test"}); w.Clients(srv2)[a] == 0 {
		t.Errorf("egress a never greeted %s (it is blocked only at %s): %v", srv2, srv1, w.Clients(srv2))
	}
}
