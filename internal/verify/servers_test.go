package verify_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
	"github.com/bulkd/bulkd/internal/verify/rules"
)

// checkExact fails on every case answered otherwise than the world's truth.
func checkExact(t *testing.T, cases []mailworld.Case, res []verify.Result) {
	t.Helper()
	wrong := 0
	for i, c := range cases {
		r := res[i]
		if r.Status == verify.StatusDeliverable && c.Status != mailworld.Deliverable {
			t.Errorf("false deliverable %s", c.Email)
		}
		if r.Status != c.Status || r.Reason != c.Reason {
			wrong++
			if wrong <= 10 {
				t.Errorf("%s: got %s/%s, want %s/%s", c.Email, r.Status, r.Reason, c.Status, c.Reason)
			}
		}
	}
	if wrong > 10 {
		t.Errorf("... %d wrong in all", wrong)
	}
}

// sharedRules is a table that knows the shared world's servers as one
// provider capped at provCap sessions (0: a rule without a cap).
func sharedRules(t *testing.T, line string) *rules.Holder {
	t.Helper()
	r, err := rules.ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	return rules.NewHolder(rules.NewTable(rules.Default(), []rules.Rule{r}))
}

// TestSharedServerCap: 30 tenants' MX names lead to ONE server; with a cap
// of 3 sessions the server never sees more than 3 at once, however many
// names lead to it (capped per MX name, it saw 7-8 in issue 20 and up to
// 30 here).
func TestSharedServerCap(t *testing.T) {
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 30, PerTenant: 10, Servers: 1,
		RTT: 20 * time.Millisecond, Seed: 1})
	w := startWorld(t, spec)
	cases := w.Cases()
	v := mustNew(t, worldConfig(w), verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	start := time.Now()
	res := v.Verify(context.Background(), emailsOf(cases))
	took := time.Since(start)
	checkExact(t, cases, res)
	ip := w.HostIP("srv1." + mailworld.SharedMXSuffix)
	hs := w.Stats().PerIP[ip]
	if hs.MaxConcurrent > 3 {
		t.Errorf("server %s saw %d concurrent sessions, cap 3", ip, hs.MaxConcurrent)
	}
	// The names' domains share the server's sessions (330 RCPTs with the
	// probes: 7 sessions of 50), not one session or more per name (30).
	if hs.Sessions > 12 {
		t.Errorf("%d sessions for 300 addresses on one server", hs.Sessions)
	}
	// Each address reports its own domain's MX name, whichever name's
	// session carried it.
	for i, c := range cases {
		dom := c.Email[strings.LastIndexByte(c.Email, '@')+1:]
		want := strings.TrimSuffix(dom, ".test") + ".mail.protection." + mailworld.SharedMXSuffix
		if r := res[i]; r.MXHost == nil || *r.MXHost != want {
			t.Errorf("%s: mx_host %v, want %s", c.Email, r.MXHost, want)
			break
		}
	}
	t.Logf("%d addresses behind 30 names on one server: %v, %d sessions, at most %d at once", len(cases), took, hs.Sessions, hs.MaxConcurrent)
}

// TestProviderCap: three servers of one provider, each capped at 3 per
// address; the rules table caps the provider at 4 over all of them.
func TestProviderCap(t *testing.T) {
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 30, PerTenant: 8, Servers: 3,
		RTT: 20 * time.Millisecond, Seed: 2})
	w := startWorld(t, spec)
	cases := w.Cases()
	cfg := worldConfig(w)
	cfg.Rules = sharedRules(t, mailworld.SharedMXSuffix+" provider=sharedmx provider_sessions=4")
	v := mustNew(t, cfg, verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	res := v.Verify(context.Background(), emailsOf(cases))
	checkExact(t, cases, res)
	st := w.Stats()
	if p := st.PerProvider[mailworld.SharedProvider]; p.MaxConcurrent > 4 || p.Sessions == 0 {
		t.Errorf("provider: %+v, cap 4", p)
	}
	for ip, hs := range st.PerIP {
		if hs.MaxConcurrent > 3 {
			t.Errorf("server %s saw %d concurrent sessions, cap 3", ip, hs.MaxConcurrent)
		}
	}
	t.Logf("provider: %+v", st.PerProvider[mailworld.SharedProvider])
}

// TestRedisLimiterByServer: two processes (two limiters on one Redis; a
// Redis Cluster with BULKD_TEST_REDIS=cluster) verify the same shared world
// at once: per server address at most 3, over the provider at most 5, as
// the servers count them.
func TestRedisLimiterByServer(t *testing.T) {
	rdb := testredis.Universal(t)
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 24, PerTenant: 6, Servers: 2,
		RTT: 20 * time.Millisecond, Seed: 3})
	w := startWorld(t, spec)
	cases := w.Cases()
	cfg := worldConfig(w)
	cfg.Rules = sharedRules(t, mailworld.SharedMXSuffix+" provider=sharedmx provider_sessions=5")
	cmds := func() int64 {
		n, _ := rdb.Info(context.Background(), "stats").Result()
		for _, l := range strings.Split(n, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				return c
			}
		}
		return 0
	}
	before := cmds()
	var wg sync.WaitGroup
	results := make([][]verify.Result, 2)
	for p := range 2 {
		v := mustNew(t, cfg, verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
		wg.Go(func() { results[p] = v.Verify(context.Background(), emailsOf(cases)) })
	}
	wg.Wait()
	for p := range results {
		checkExact(t, cases, results[p])
	}
	st := w.Stats()
	for ip, hs := range st.PerIP {
		if hs.MaxConcurrent > 3 {
			t.Errorf("server %s saw %d concurrent sessions, cap 3", ip, hs.MaxConcurrent)
		}
	}
	if p := st.PerProvider[mailworld.SharedProvider]; p.MaxConcurrent > 5 {
		t.Errorf("provider saw %d concurrent sessions, cap 5", p.MaxConcurrent)
	}
	// Nothing is left holding a slot once the sessions parked for a next
	// call (Config.SessionIdle, 2 s) have ended.
	ctx := context.Background()
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{})
	for ip := range st.PerIP {
		deadline := time.Now().Add(6 * time.Second)
		for {
			n, err := lim.Holders(ctx, verify.ServerKey("", ip))
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("server %s: %d holders left (%v)", ip, n, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("provider: %+v; Redis commands: %d (one node's count on a cluster)", st.PerProvider[mailworld.SharedProvider], cmds()-before)
}

// TestRulesApplied: a rule's RCPTs per session keeps sessions within a
// server's limit from the start (no 452), and probe=no trusts a 250 without
// a catch-all probe.
func TestRulesApplied(t *testing.T) {
	spec := mailworld.Classes(mailworld.ClassOptions{})
	w := startWorld(t, spec)
	cfg := worldConfig(w)
	tbl := rules.NewTable(nil, []rules.Rule{
		mustRule(t, "many.test rcpts=3"),
		mustRule(t, "mx.ok.test probe=no"),
	})
	cfg.Rules = rules.NewHolder(tbl)
	v := mustNew(t, cfg, nil)
	var emails []string
	for _, c := range spec.Cases {
		if strings.HasSuffix(c.Email, "@many.test") {
			emails = append(emails, c.Email)
		}
	}
	res := v.Verify(context.Background(), emails)
	for i, e := range emails {
		c, _ := w.Expect(e)
		if res[i].Status != c.Status || res[i].Reason != c.Reason {
			t.Errorf("%s: %s/%s", e, res[i].Status, res[i].Reason)
		}
	}
	if n := w.Stats().PerHost["mx.many.test"].Replies452; n != 0 {
		t.Errorf("%d replies 452 with rcpts=3 on a 3-RCPT server", n)
	}
	before := w.Stats().PerHost["mx.ok.test"].Rcpts
	if r := v.VerifyOne(context.Background(), "alice@ok.test"); r.Status != verify.StatusDeliverable {
		t.Errorf("alice@ok.test: %+v", r)
	}
	if n := w.Stats().PerHost["mx.ok.test"].Rcpts - before; n != 1 {
		t.Errorf("probe=no: %d RCPTs for one address, want 1 (no probe)", n)
	}
}

func mustRule(t *testing.T, line string) rules.Rule {
	t.Helper()
	r, err := rules.ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRedisLimiterSlot: the Redis limiter's per-key state (cluster-safe
// with BULKD_TEST_REDIS=cluster): a provider's cap over its servers, a
// provider's back-off stopping a session to any of its servers, a server's
// back-off not stopping its provider's other servers, and the shared block
// and RCPT limit by key.
func TestRedisLimiterSlot(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 2, SessionsPerSecond: 1000})
	prov := verify.ProviderKey("", "acme")
	a, b := verify.ServerKey("", "192.0.2.1"), verify.ServerKey("", "192.0.2.2")
	rel1, _, err := lim.AcquireSlot(ctx, verify.Slot{Server: a, Provider: prov, ProviderCap: 2})
	if err != nil || rel1 == nil {
		t.Fatal(err)
	}
	rel2, _, err := lim.AcquireSlot(ctx, verify.Slot{Server: b, Provider: prov, ProviderCap: 2})
	if err != nil || rel2 == nil {
		t.Fatal(err)
	}
	// The provider is full: a third session to a's server waits.
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	if rel, _, err := lim.AcquireSlot(short, verify.Slot{Server: a, Provider: prov, ProviderCap: 2}); err == nil {
		rel()
		t.Fatal("a third session over a provider cap of 2")
	}
	cancel()
	if n, _ := lim.Holders(ctx, a); n != 1 {
		t.Fatalf("server a holds %d, want 1 (a waiter for the provider gives the server slot back)", n)
	}
	rel1()
	rel2()
	// A server's back-off (a 421) leaves the provider's other servers alone.
	if err := lim.Backoff(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rel, left, _ := lim.AcquireSlot(ctx, verify.Slot{Server: a, Provider: prov}); rel != nil || left <= 0 {
		t.Fatal("server a not backed off")
	}
	rel, _, err := lim.AcquireSlot(ctx, verify.Slot{Server: b, Provider: prov})
	if err != nil || rel == nil {
		t.Fatalf("server b stopped by a's back-off: %v", err)
	}
	rel()
	// A provider's back-off (a block) stops all its servers.
	if err := lim.Backoff(ctx, prov, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rel, left, _ := lim.AcquireSlot(ctx, verify.Slot{Server: b, Provider: prov}); rel != nil || left <= 0 {
		t.Fatal("server b not stopped by its provider's back-off")
	}
	if err := lim.ShareBlock(ctx, prov, time.Minute); err != nil {
		t.Fatal(err)
	}
	if blk, err := lim.SharedBlock(ctx, prov); err != nil || !blk {
		t.Fatalf("SharedBlock: %v %v", blk, err)
	}
	if blk, _ := lim.SharedBlock(ctx, b); blk {
		t.Fatal("a provider's block read as server b's own")
	}
	rk := verify.ProviderKey(verify.AnyEgress, "acme")
	if err := lim.ShareRcptLimit(ctx, rk, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	_ = lim.ShareRcptLimit(ctx, rk, 9, time.Minute) // only ever lowers
	if n, err := lim.SharedRcptLimit(ctx, rk); err != nil || n != 5 {
		t.Fatalf("SharedRcptLimit = %d, %v", n, err)
	}
}

// TestSharedServerLearnsCap: a server of many names that allows 2
// sessions, asked with a cap of 3: its 421 to the third teaches the call 2
// for the server (whatever name the next sessions come by), and every
// answer is still exact.
func TestSharedServerLearnsCap(t *testing.T) {
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 20, PerTenant: 10, Servers: 1,
		MaxConnsPerServer: 2, RTT: 20 * time.Millisecond, Seed: 4})
	w := startWorld(t, spec)
	cases := w.Cases()
	v := mustNew(t, worldConfig(w), verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	res := v.Verify(context.Background(), emailsOf(cases))
	checkExact(t, cases, res)
	hs := w.Stats().PerIP[w.HostIP("srv1."+mailworld.SharedMXSuffix)]
	if hs.Rejected421 > 1 {
		t.Errorf("%d sessions refused with 421: the cap learned from the first was not kept", hs.Rejected421)
	}
	t.Logf("%d sessions, %d refused with 421", hs.Sessions, hs.Rejected421)
}

// TestPoolSpread: every tenant's MX name resolves to both servers of a
// pool; sessions spread over the two addresses, each within its cap of 3.
func TestPoolSpread(t *testing.T) {
	spec := mailworld.SharedServers(mailworld.SharedServersOptions{Tenants: 20, PerTenant: 10, Servers: 2, Pool: 2,
		RTT: 20 * time.Millisecond, Seed: 5})
	w := startWorld(t, spec)
	cases := w.Cases()
	v := mustNew(t, worldConfig(w), verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	res := v.Verify(context.Background(), emailsOf(cases))
	checkExact(t, cases, res)
	for _, srv := range []string{"srv1.", "srv2."} {
		hs := w.Stats().PerIP[w.HostIP(srv+mailworld.SharedMXSuffix)]
		if hs.Sessions == 0 || hs.MaxConcurrent > 3 {
			t.Errorf("%s: %d sessions, at most %d at once (want some, at most 3)", srv, hs.Sessions, hs.MaxConcurrent)
		}
		t.Logf("%s: %d sessions, at most %d at once", srv, hs.Sessions, hs.MaxConcurrent)
	}
}

// TestRuleTimeout: a server slower than the verifier's reply timeout is a
// tarpit, unless its rule gives it longer.
func TestRuleTimeout(t *testing.T) {
	spec := mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.slow.test", Tarpit: 300 * time.Millisecond}},
		Domains: []mailworld.Domain{{Name: "slow.test", MX: []string{"mx.slow.test"}, Users: []string{"alice"}}},
	}
	w := startWorld(t, spec)
	cfg := worldConfig(w)
	cfg.CommandTimeout = 200 * time.Millisecond
	if r := mustNew(t, cfg, nil).VerifyOne(context.Background(), "alice@slow.test"); r.Reason != verify.ReasonTimeout {
		t.Fatalf("without a rule: %s/%s, want timeout", r.Status, r.Reason)
	}
	cfg.Rules = rules.NewHolder(rules.NewTable(nil, []rules.Rule{mustRule(t, "slow.test timeout=1s")}))
	if r := mustNew(t, cfg, nil).VerifyOne(context.Background(), "alice@slow.test"); r.Status != verify.StatusDeliverable {
		t.Fatalf("with timeout=1s: %s/%s", r.Status, r.Reason)
	}
}

// TestPoolWithDeadServer: a name resolving to a server that refuses
// connections and one that works: every answer comes from the live one.
func TestPoolWithDeadServer(t *testing.T) {
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{
			{Name: "dead.pool.test", Refuse: true, Aliases: []string{"mx.pool.test"}},
			{Name: "live.pool.test", Aliases: []string{"mx.pool.test"}},
		},
		Domains: []mailworld.Domain{{Name: "pool.test", MX: []string{"mx.pool.test"}, Users: []string{"a", "b", "c"}}},
	}
	w := startWorld(t, spec)
	cfg := worldConfig(w)
	cfg.MaxRcptsPerSession = 2 // one address per session: several sessions
	v := mustNew(t, cfg, nil)
	emails := []string{"a@pool.test", "b@pool.test", "c@pool.test", "nobody@pool.test"}
	res := v.Verify(context.Background(), emails)
	for i, r := range res {
		want := verify.StatusDeliverable
		if i == 3 {
			want = verify.StatusUndeliverable
		}
		if r.Status != want {
			t.Errorf("%s: %s/%s", emails[i], r.Status, r.Reason)
		}
	}
}
