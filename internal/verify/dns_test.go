package verify

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeDNS is an in-process DNS server (UDP and TCP on one port) whose
// answers a test scripts per question.
type fakeDNS struct {
	addr    string
	queries atomic.Int64
	tcp     atomic.Int64
	mu      sync.Mutex
	answer  func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool // false: do not answer
}

func startFakeDNS(t *testing.T, answer func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool) *fakeDNS {
	t.Helper()
	f := &fakeDNS{answer: answer}
	// UDP and TCP on one port: the UDP port the kernel picks may be taken
	// for TCP (another test's connection), so try a few.
	var pc net.PacketConn
	var l net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if try == 20 {
			t.Fatal(err)
		}
	}
	f.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		f.queries.Add(1)
		if w.RemoteAddr().Network() == "tcp" {
			f.tcp.Add(1)
		}
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if f.answer(w, r.Question[0], m) {
			_ = w.WriteMsg(m)
		}
	})
	us := &dns.Server{PacketConn: pc, Handler: h}
	ts := &dns.Server{Listener: l, Handler: h}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
	return f
}

func rr(t *testing.T, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLookupMX(t *testing.T) {
	var f *fakeDNS
	f = startFakeDNS(t, func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool {
		name := strings.ToLower(q.Name)
		switch {
		case name == "mx.test." && q.Qtype == dns.TypeMX:
			m.Answer = append(m.Answer, rr(t, "mx.test. 300 IN MX 20 b.mx.test."), rr(t, "mx.test. 300 IN MX 10 a.mx.test."),
				rr(t, "mx.test. 300 IN MX 20 c.mx.test."), rr(t, "mx.test. 300 IN MX 30 a.mx.test."))
		case name == "null.test." && q.Qtype == dns.TypeMX:
			m.Answer = append(m.Answer, rr(t, "null.test. 300 IN MX 0 ."))
		case name == "implicit.test." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, rr(t, "implicit.test. 300 IN A 192.0.2.1"))
		case name == "v6only.test." && q.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, rr(t, "v6only.test. 300 IN AAAA 2001:db8::1"))
		case name == "alias.test." && q.Qtype == dns.TypeMX:
			m.Answer = append(m.Answer, rr(t, "alias.test. 300 IN CNAME target.test."))
		case name == "target.test." && q.Qtype == dns.TypeMX:
			m.Answer = append(m.Answer, rr(t, "target.test. 300 IN MX 5 mx.target.test."))
		case name == "nx.test.":
			m.Rcode = dns.RcodeNameError
		case name == "fail.test.":
			m.Rcode = dns.RcodeServerFailure
		case name == "silent.test.":
			return false
		case name == "big.test." && q.Qtype == dns.TypeMX:
			for i := 0; i < 60; i++ {
				m.Answer = append(m.Answer, rr(t, fmt.Sprintf("big.test. 300 IN MX 10 a-rather-long-mail-exchanger-name-%02d.big.test.", i)))
			}
			if w.RemoteAddr().Network() == "udp" {
				m.Answer = nil
				m.Truncated = true
			}
		}
		return true
	})
	r, err := newResolver(f.addr, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	v := r.lookupMX(ctx, "mx.test")
	if v.reason != "" || len(v.hosts) != 3 || v.hosts[0].name != "a.mx.test" || v.hosts[0].pref != 10 {
		t.Fatalf("mx.test: %+v", v)
	}
	if v2 := r.lookupMX(ctx, "MX.test"); v2.hosts[1] != v.hosts[1] {
		t.Fatal("tie order not stable within a process")
	}
	for dom, want := range map[string]string{"null.test": ReasonNullMX, "nx.test": ReasonNoSuchDomain,
		"fail.test": ReasonDNSError, "silent.test": ReasonDNSError, "nothing.test": ReasonNoMailServer} {
		if got := r.lookupMX(ctx, dom); got.reason != want {
			t.Errorf("%s: %+v, want %s", dom, got, want)
		}
	}
	if v := r.lookupMX(ctx, "implicit.test"); v.reason != "" || !v.implicit || v.hosts[0].name != "implicit.test" {
		t.Errorf("implicit: %+v", v)
	}
	if v := r.lookupMX(ctx, "v6only.test"); v.reason != "" || !v.implicit {
		t.Errorf("v6only: %+v", v)
	}
	if v := r.lookupMX(ctx, "alias.test"); v.reason != "" || v.hosts[0].name != "mx.target.test" {
		t.Errorf("alias: %+v", v)
	}
	if v := r.lookupMX(ctx, "big.test"); v.reason != "" || len(v.hosts) != 60 || f.tcp.Load() == 0 {
		t.Errorf("truncated answer not retried over TCP: %d hosts, %d tcp", len(v.hosts), f.tcp.Load())
	}
	ips, err := r.hostAddrs(ctx, "v6only.test")
	if err != nil || len(ips) != 1 || !ips[0].Is6() {
		t.Errorf("hostAddrs v6only: %v %v", ips, err)
	}

	// Answers are cached (negative ones too); failures are retried once
	// and not cached.
	before := f.queries.Load()
	r.lookupMX(ctx, "mx.test")
	r.lookupMX(ctx, "nx.test")
	if f.queries.Load() != before {
		t.Error("cached answers were asked again")
	}
	r.lookupMX(ctx, "fail.test")
	if n := f.queries.Load() - before; n != 2 {
		t.Errorf("SERVFAIL asked %d times, want 2 (one retry)", n)
	}
}

func TestLookupCoalesced(t *testing.T) {
	release := make(chan struct{})
	f := startFakeDNS(t, func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool {
		<-release
		m.Answer = append(m.Answer, rr(t, "slow.test. 300 IN MX 10 mx.slow.test."))
		return true
	})
	r, err := newResolver(f.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			if v := r.lookupMX(context.Background(), "slow.test"); v.reason != "" {
				t.Errorf("%+v", v)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := f.queries.Load(); n != 1 {
		t.Fatalf("20 concurrent lookups sent %d queries", n)
	}
}

func TestCollectTTL(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("a.test.", dns.TypeA)
	m.Answer = []dns.RR{rr(t, "a.test. 5 IN A 192.0.2.1")}
	if _, ttl, _ := collect(m, "a.test.", dns.TypeA); ttl != minTTL {
		t.Errorf("ttl %v, want clamped to %v", ttl, minTTL)
	}
	m.Answer = []dns.RR{rr(t, "a.test. 86400 IN A 192.0.2.1")}
	if _, ttl, _ := collect(m, "a.test.", dns.TypeA); ttl != maxTTL {
		t.Errorf("ttl %v, want clamped to %v", ttl, maxTTL)
	}
}

func TestTTLCacheBounded(t *testing.T) {
	c := newTTLCache[int, int](100)
	exp := time.Now().Add(time.Hour)
	for i := 0; i < 1000; i++ {
		c.put(i, i, exp)
	}
	if n := c.len(); n > 100 {
		t.Fatalf("cache holds %d > 100", n)
	}
	if v, ok := c.get(999, time.Now()); !ok || v != 999 {
		t.Fatal("latest entry lost")
	}
	c.put(-1, 1, time.Now().Add(-time.Second))
	if _, ok := c.get(-1, time.Now()); ok {
		t.Fatal("expired entry returned")
	}
}
