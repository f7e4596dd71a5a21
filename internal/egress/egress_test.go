package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testsocks"
)

func TestParse(t *testing.T) {
	def := egress.Flags{Helo: "mx.example.com"}
	cases := []struct {
		name    string
		f       egress.Flags
		want    []string // Egress.String() of each
		public  []string
		wantErr string
	}{
		{name: "default", f: def, want: []string{"default (helo mx.example.com)"}, public: []string{""}},
		{name: "source ips", f: egress.Flags{Helo: "mx.example.com", SourceIPs: "203.0.113.5=a.example.com, 10.0.0.7"},
			want:   []string{"203.0.113.5 (helo a.example.com, source 203.0.113.5)", "10.0.0.7 (helo mx.example.com, source 10.0.0.7)"},
			public: []string{"203.0.113.5", ""}},
		{name: "proxy", f: egress.Flags{Helo: "mx.example.com", Proxy: "socks5://u:p%40ss@10.1.2.3:1080"},
			want: []string{"proxy (helo mx.example.com, proxy socks5://10.1.2.3:1080)"}, public: []string{""}},
		{name: "full", f: egress.Flags{Helo: "mx.example.com", Egress: "name=one,source=198.51.100.1,helo=one.example.com; name=two,proxy=socks5://[::1]:1080,helo=two.example.com,public_ip=198.51.100.2"},
			want:   []string{"one (helo one.example.com, source 198.51.100.1)", "two (helo two.example.com, proxy socks5://[::1]:1080)"},
			public: []string{"198.51.100.1", "198.51.100.2"}},
		{name: "full default names", f: egress.Flags{Helo: "mx.example.com", Egress: "source=198.51.100.1;source=198.51.100.2"},
			want: []string{"e1 (helo mx.example.com, source 198.51.100.1)", "e2 (helo mx.example.com, source 198.51.100.2)"}},
		{name: "two forms", f: egress.Flags{Helo: "h", Proxy: "socks5://h:1", SourceIPs: "1.2.3.4"}, wantErr: "use one of"},
		{name: "http proxy", f: egress.Flags{Helo: "h", Proxy: "http://h:1"}, wantErr: "only socks5"},
		{name: "no port", f: egress.Flags{Helo: "h", Proxy: "socks5://user:hunter2@h"}, wantErr: "host:port"},
		{name: "unknown key", f: egress.Flags{Helo: "h", Egress: "name=a,via=b"}, wantErr: "unknown key"},
		{name: "dup", f: egress.Flags{Helo: "h", Egress: "name=a,source=1.2.3.4;name=a,source=1.2.3.5"}, wantErr: "twice"},
		{name: "same route", f: egress.Flags{Helo: "h", Egress: "name=a,helo=x;name=b,helo=y"}, wantErr: "same way"},
		{name: "same proxy", f: egress.Flags{Helo: "h", Egress: "name=a,proxy=socks5://p:1;name=b,proxy=socks5://u:v@p:1"}, wantErr: "same way"},
		{name: "bad name", f: egress.Flags{Helo: "h", Egress: "name=a b"}, wantErr: "name"},
		{name: "bad ip", f: egress.Flags{Helo: "h", SourceIPs: "1.2.3"}, wantErr: "source-ips"},
		{name: "no helo", f: egress.Flags{Egress: "source=1.2.3.4"}, wantErr: "no HELO"},
		{name: "bad proxy kv", f: egress.Flags{Helo: "h", Egress: "proxy=socks5://u:hunter2@h:1:2"}, wantErr: "proxy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			egs, err := egress.Parse(c.f)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error quotes the proxy password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(egs) != len(c.want) {
				t.Fatalf("%d egresses, want %d", len(egs), len(c.want))
			}
			for i := range egs {
				if got := egs[i].String(); got != c.want[i] {
					t.Errorf("#%d %q, want %q", i, got, c.want[i])
				}
				if c.public != nil {
					got := ""
					if egs[i].PublicIP.IsValid() {
						got = egs[i].PublicIP.String()
					}
					if got != c.public[i] {
						t.Errorf("#%d public %q, want %q", i, got, c.public[i])
					}
				}
			}
		})
	}
}

// echoServer accepts connections on 127.0.0.1 and sends each one the
// client's address, then closes.
func echoServer(t *testing.T) (netip.AddrPort, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(c.RemoteAddr().(*net.TCPAddr).IP.String() + "\n"))
			c.Close()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), func() { ln.Close() }
}

func readPeer(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 64)
	n, _ := c.Read(b)
	return strings.TrimSpace(string(b[:n]))
}

var loopback = &outbound.Policy{Allow: outbound.LoopbackPrefixes}

func TestDialSourceAddress(t *testing.T) {
	ap, stop := echoServer(t)
	defer stop()
	e := egress.Egress{Name: "a", Helo: "a.test", Source: netip.MustParseAddr("127.0.0.2")}
	c, err := e.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if got := readPeer(t, c); got != "127.0.0.2" {
		t.Errorf("the server saw %s, want the source 127.0.0.2", got)
	}
	if _, err := e.Dial(context.Background(), netip.MustParseAddr("::1"), 25, time.Second, loopback); !errors.Is(err, egress.ErrFamily) {
		t.Errorf("IPv6 target from an IPv4 source: %v, want ErrFamily", err)
	}
	// The policy still applies to direct dials.
	if _, err := e.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, nil); !errors.Is(err, outbound.ErrRefused) {
		t.Errorf("loopback target without the allowance: %v, want refused", err)
	}
}

func TestDialThroughSOCKS5(t *testing.T) {
	ap, stop := echoServer(t)
	defer stop()
	px := testsocks.Start(t, testsocks.Options{User: "u", Password: "p:w@d", Source: netip.MustParseAddr("127.0.0.7")})
	good := &url.URL{Scheme: "socks5", Host: px.Addr, User: url.UserPassword("u", "p:w@d")}
	e := egress.Egress{Name: "px", Helo: "px.test", Proxy: good}
	c, err := e.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if got := readPeer(t, c); got != "127.0.0.7" {
		t.Errorf("the server saw %s, want the proxy's 127.0.0.7", got)
	}
	if cs := px.Connects(); len(cs) != 1 || cs[0].Name || cs[0].Target != ap.String() {
		t.Errorf("CONNECTs %+v, want one to the literal %s", cs, ap)
	}

	// Wrong password: a proxy failure, without the password in it.
	bad := e
	bad.Proxy = &url.URL{Scheme: "socks5", Host: px.Addr, User: url.UserPassword("u", "nottheone")}
	_, err = bad.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, loopback)
	if !egress.IsProxyFailure(err) || strings.Contains(err.Error(), "nottheone") {
		t.Errorf("wrong password: %v, want a proxy failure without the password", err)
	}
	// No credentials to a proxy that wants them.
	anon := e
	anon.Proxy = &url.URL{Scheme: "socks5", Host: px.Addr}
	if _, err := anon.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, loopback); !egress.IsProxyFailure(err) {
		t.Errorf("no credentials: %v, want a proxy failure", err)
	}
	// A refused target is the target's failure, not the proxy's.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	_, err = e.Dial(context.Background(), closed.Addr(), int(closed.Port()), time.Second, loopback)
	var te *egress.TargetError
	if !errors.As(err, &te) || egress.IsProxyFailure(err) {
		t.Errorf("refused target: %v, want a TargetError", err)
	}
	// The policy is checked before the proxy is asked anything.
	n := len(px.Connects())
	if _, err := e.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, nil); !errors.Is(err, outbound.ErrRefused) {
		t.Errorf("loopback target without the allowance: %v, want refused", err)
	}
	if len(px.Connects()) != n {
		t.Error("the proxy was asked to CONNECT to a refused address")
	}
	// An unreachable proxy is a proxy failure.
	px.Close()
	if _, err := e.Dial(context.Background(), ap.Addr(), int(ap.Port()), time.Second, loopback); !egress.IsProxyFailure(err) {
		t.Errorf("proxy down: %v, want a proxy failure", err)
	}
}

// TestDialProxyHandshakeTimeout: a proxy that accepts and never answers
// costs at most the dial timeout.
func TestDialProxyHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent
		}
	}()
	e := egress.Egress{Name: "px", Helo: "px.test", Proxy: &url.URL{Scheme: "socks5", Host: ln.Addr().String()}}
	start := time.Now()
	_, err = e.Dial(context.Background(), netip.MustParseAddr("127.0.0.1"), 25, 300*time.Millisecond, loopback)
	if !egress.IsProxyFailure(err) {
		t.Errorf("silent proxy: %v, want a proxy failure", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("silent proxy took %v, want about the 300ms dial timeout", d)
	}
}

// dnsZone is a small authoritative DNS server for the HELO check.
type dnsZone struct {
	a   map[string][]string // name -> addresses
	ptr map[string]string   // address -> name
}

func startDNS(t *testing.T, z dnsZone) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
		found := false
		for _, ip := range z.a[name] {
			found = true
			a := netip.MustParseAddr(ip)
			if q.Qtype == dns.TypeA && a.Is4() {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
			}
			if q.Qtype == dns.TypeAAAA && a.Is6() {
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60}, AAAA: a.AsSlice()})
			}
		}
		for ip, n := range z.ptr {
			rev, _ := dns.ReverseAddr(ip)
			if strings.EqualFold(rev, q.Name) {
				found = true
				if q.Qtype == dns.TypePTR {
					m.Answer = append(m.Answer, &dns.PTR{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 60}, Ptr: dns.Fqdn(n)})
				}
			}
		}
		if !found {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

func TestHeloCheck(t *testing.T) {
	addr := startDNS(t, dnsZone{
		a: map[string][]string{
			"good.example.com":  {"198.51.100.1"},
			"noptr.example.com": {"198.51.100.2"},
			"other.example.com": {"198.51.100.3"},
			"fcr.example.com":   {"198.51.100.4", "2001:db8::4"},
		},
		ptr: map[string]string{
			"198.51.100.1": "good.example.com",
			"198.51.100.3": "somebody-else.example.net",
			"198.51.100.4": "fcr.example.com",
			"2001:db8::4":  "fcr.example.com",
		},
	})
	ip := netip.MustParseAddr
	egs := []egress.Egress{
		{Name: "ok", Helo: "good.example.com", PublicIP: ip("198.51.100.1")},
		{Name: "wrong-a", Helo: "good.example.com", PublicIP: ip("198.51.100.9")},
		{Name: "no-ptr", Helo: "noptr.example.com", PublicIP: ip("198.51.100.2")},
		{Name: "wrong-ptr", Helo: "other.example.com", PublicIP: ip("198.51.100.3")},
		{Name: "no-a", Helo: "missing.example.com", PublicIP: ip("198.51.100.1")},
		{Name: "unknown-ip", Helo: "fcr.example.com"},
		{Name: "unknown-ip-bad", Helo: "other.example.com"},
		{Name: "literal", Helo: "[198.51.100.1]"},
	}
	want := map[string]string{"ok": egress.CheckOK, "wrong-a": egress.CheckMismatch, "no-ptr": egress.CheckMismatch,
		"wrong-ptr": egress.CheckMismatch, "no-a": egress.CheckMismatch, "unknown-ip": egress.CheckUnverified,
		"unknown-ip-bad": egress.CheckMismatch, "literal": egress.CheckMismatch}
	c := egress.NewChecker(addr, time.Second, egs)
	for _, r := range c.Results() {
		if r.Status != egress.CheckPending {
			t.Errorf("%s before the run: %s, want pending", r.Egress, r.Status)
		}
	}
	c.Run(context.Background(), egs, nil)
	for _, r := range c.Results() {
		if r.Status != want[r.Egress] {
			t.Errorf("%s: %s (%s), want %s", r.Egress, r.Status, r.Detail, want[r.Egress])
		}
		t.Logf("%s: %s: %s", r.Egress, r.Status, r.Detail)
	}

	// The gauge an operator alerts on.
	reg := prometheus.NewRegistry()
	reg.MustRegister(egress.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauge := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			gauge[l["egress"]+"/"+l["status"]] = m.GetGauge().GetValue()
		}
	}
	if gauge["ok/ok"] != 1 || gauge["ok/mismatch"] != 0 || gauge["wrong-ptr/mismatch"] != 1 || gauge["unknown-ip/unverified"] != 1 {
		t.Errorf("bulkd_smtp_egress_helo_check: %v", gauge)
	}

	// A DNS server that does not answer: error, within the timeouts.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	dead := egress.NewChecker(pc.LocalAddr().String(), 100*time.Millisecond, egs[:1])
	start := time.Now()
	res := dead.Run(context.Background(), egs[:1], nil)
	if res[0].Status != egress.CheckError {
		t.Errorf("silent DNS: %s, want error", res[0].Status)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("silent DNS took %v", d)
	}

}
