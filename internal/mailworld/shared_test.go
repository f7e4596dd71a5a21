package mailworld

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestSharedServers: tenant MX names are aliases of a few servers; they
// resolve to the servers' addresses, any server accepts any tenant, and
// sessions are counted per server address and per provider whatever name
// led there.
func TestSharedServers(t *testing.T) {
	spec := SharedServers(SharedServersOptions{Tenants: 6, PerTenant: 4, Servers: 2, Pool: 2, ProviderMaxConns: 3})
	checkCases(t, spec)
	w := start(t, spec)
	ips := w.HostIPs("tenant-03.mail.protection." + SharedMXSuffix)
	if want := []string{w.HostIP("srv1." + SharedMXSuffix), w.HostIP("srv2." + SharedMXSuffix)}; !slices.Equal(ips, want) {
		t.Fatalf("tenant-03's MX resolves to %v, want %v", ips, want)
	}
	r := query(t, w, "udp", "tenant-01.test", dns.TypeMX)
	nA := 0
	for _, rr := range r.Extra {
		if _, ok := rr.(*dns.A); ok {
			nA++
		}
	}
	if len(r.Answer) != 1 || nA != 2 {
		t.Fatalf("tenant-01.test MX: %v", r)
	}
	r = query(t, w, "udp", "tenant-01.mail.protection."+SharedMXSuffix, dns.TypeA)
	if len(r.Answer) != 2 {
		t.Fatalf("alias A: %v", r)
	}
	// The reference verifier gets every case right through the aliases.
	for _, c := range w.Cases() {
		if st, re := refVerify(w, c.Email, nil); st != c.Status || re != c.Reason {
			t.Errorf("%s: reference verifier says %s/%s, case says %s/%s", c.Email, st, re, c.Status, c.Reason)
		}
	}
	// The reference verifier's sessions end as the server notices them
	// closed: wait for that before counting afresh.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		open := 0
		for _, hs := range w.Stats().PerIP {
			open += hs.Concurrent
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still open", open)
		}
	}
	w.ResetStats()
	// Two sessions through two tenant names on one server: one address,
	// two concurrent sessions as the server counts them.
	a := dial(t, w, "tenant-01.mail.protection."+SharedMXSuffix)
	a.hello()
	b := dial(t, w, "tenant-02.mail.protection."+SharedMXSuffix)
	b.hello()
	srv1 := w.HostIP("srv1." + SharedMXSuffix)
	st := w.Stats()
	if hs := st.PerIP[srv1]; hs.Concurrent != 2 || hs.MaxConcurrent != 2 || hs.IP != srv1 {
		t.Errorf("server %s: %+v, want 2 concurrent", srv1, hs)
	}
	// A tenant's addresses are accepted on a server its name does not
	// resolve to first (SMTP cannot tell names apart).
	b.cmd("MAIL FROM:<x@client.test>", "250")
	b.cmd("RCPT TO:<nobody@tenant-05.test>", "550 5.1.1")
	// The provider's cap of 3 over both servers: the 4th session is refused.
	c := dial(t, w, "srv2."+SharedMXSuffix)
	c.hello()
	d := dial(t, w, "srv2."+SharedMXSuffix)
	d.expect("banner", "421 4.7.0")
	st = w.Stats()
	ps := st.PerProvider[SharedProvider]
	if ps.MaxConcurrent != 4 || ps.Rejected421 != 1 || ps.Sessions != 4 {
		t.Errorf("provider: %+v, want 4 at most at once (3 and the refused one), 1 refused", ps)
	}
	a.cmd("QUIT", "221")
	b.cmd("QUIT", "221")
	c.cmd("QUIT", "221")
}

func TestAliasErrors(t *testing.T) {
	for name, spec := range map[string]Spec{
		"alias is a host": {Hosts: []Host{{Name: "mx1.a.test"}, {Name: "mx2.a.test", Aliases: []string{"mx1.a.test"}}}},
		"empty alias":     {Hosts: []Host{{Name: "mx1.a.test", Aliases: []string{" "}}}},
	} {
		if w, err := Start(t.Context(), spec); err == nil {
			w.Close()
			t.Errorf("%s: Start accepted the spec", name)
		}
	}
}
