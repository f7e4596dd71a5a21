package verify

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/outbound"
)

// loopbackAllowed is the outbound allowance of tests whose mail servers
// listen on loopback (an operator's --outbound-allow-cidrs 127.0.0.0/8).
var loopbackAllowed = &outbound.Policy{Allow: outbound.LoopbackPrefixes}

// acceptAll answers a session that would make every address deliverable:
// the catch-all probe refused, every other recipient accepted.
func acceptAll(cmd string) string {
	u := strings.ToUpper(cmd)
	switch {
	case strings.HasPrefix(u, "EHLO"):
		return "250-mx.inside.test\r\n250 PIPELINING"
	case strings.HasPrefix(u, "MAIL"), strings.HasPrefix(u, "RSET"):
		return "250 ok"
	case strings.HasPrefix(u, "RCPT") && strings.Contains(u, "BULKD-PROBE-"):
		return "550 5.1.1 no such user"
	case strings.HasPrefix(u, "RCPT"):
		return "250 ok"
	}
	return ""
}

// insideDNS is a DNS server whose mail hosts are all inside: on loopback
// (where srvPort's SMTP server listens), a private address, the metadata
// address, and a name with a loopback address next to a public one.
func insideDNS(t *testing.T) *fakeDNS {
	return startFakeDNS(t, func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool {
		name := strings.ToLower(q.Name)
		mx := func(hosts ...string) {
			for i, h := range hosts {
				m.Answer = append(m.Answer, rr(t, name+" 300 IN MX "+strconv.Itoa(10*(i+1))+" "+h))
			}
		}
		a := func(ips ...string) {
			for _, ip := range ips {
				m.Answer = append(m.Answer, rr(t, name+" 300 IN A "+ip))
			}
		}
		switch {
		case q.Qtype == dns.TypeMX && name == "loop.test.":
			mx("mx.loop.test.")
		case q.Qtype == dns.TypeMX && name == "private.test.":
			mx("mx.private.test.")
		case q.Qtype == dns.TypeMX && name == "meta.test.":
			mx("mx.meta.test.")
		case q.Qtype == dns.TypeMX && name == "mixed.test.":
			mx("mx.mixed.test.")
		case q.Qtype == dns.TypeMX && name == "two.test.":
			mx("mx.loop.test.", "mx.private.test.")
		case q.Qtype == dns.TypeMX && name == "tarpit.test.":
			mx("mx.tarpit.test.")
		case q.Qtype == dns.TypeA && name == "implicit.test.": // no MX: the domain is its own
			a("127.0.0.1")
		case q.Qtype == dns.TypeA && name == "mx.loop.test.":
			a("127.0.0.1")
		case q.Qtype == dns.TypeA && name == "mx.private.test.":
			a("10.255.255.1")
		case q.Qtype == dns.TypeA && name == "mx.meta.test.":
			a("169.254.169.254")
		case q.Qtype == dns.TypeA && name == "mx.mixed.test.":
			a("127.0.0.1", "198.51.100.25")
		case q.Qtype == dns.TypeA && name == "mx.tarpit.test.":
			a("127.0.0.3")
		}
		return true
	})
}

// TestInternalAddressesGetNoSMTP: with the default policy, an address
// literal naming an internal address and a domain whose MX hosts resolve
// only to internal addresses get no SMTP session (the loopback server
// counts them) and the documented verdict, undeliverable/no_mail_server,
// at once; the same server is reached once the operator allows loopback.
func TestInternalAddressesGetNoSMTP(t *testing.T) {
	srv := startScriptedSMTP(t, "220 mx.inside.test", acceptAll)
	f := insideDNS(t)
	cfg := Config{DNSServer: f.addr, SMTPPort: srv.port, DialTimeout: 2 * time.Second, CommandTimeout: 2 * time.Second}
	v, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emails := []string{"a@[127.0.0.1]", "a@[0.0.0.0]", "a@[IPv6:::1]", "a@[10.255.255.1]",
		"a@[169.254.169.254]", "a@[100.64.0.1]", "a@[IPv6:fd00::1]",
		"alice@loop.test", "alice@private.test", "alice@meta.test", "alice@mixed.test", "alice@two.test", "alice@implicit.test"}
	start := time.Now()
	res := v.Verify(context.Background(), emails)
	el := time.Since(start)
	for i, r := range res {
		if r.Status != StatusUndeliverable || r.Reason != ReasonNoMailServer || r.SMTPCode != 0 || r.Score != 0 || r.Temporary {
			t.Errorf("%s: %s/%s code %d score %d temporary %v; want undeliverable/no_mail_server without SMTP",
				emails[i], r.Status, r.Reason, r.SMTPCode, r.Score, r.Temporary)
		}
		if literal := strings.Contains(emails[i], "["); literal != (r.MXHost == nil) {
			t.Errorf("%s: mx_host %v", emails[i], r.MXHost)
		}
	}
	if n := srv.sessions.Load(); n != 0 {
		t.Fatalf("the loopback SMTP server got %d sessions", n)
	}
	t.Logf("%d refused addresses answered in %v", len(emails), el)
	// Only DNS answers on loopback were waited for: no dial timeout (the
	// private and metadata addresses would cost one each), no SMTP.
	if el > 500*time.Millisecond {
		t.Fatalf("refused addresses answered after %v, want at once", el)
	}

	// The operator's allowance opens loopback (and nothing else).
	cfg.Policy = loopbackAllowed
	v, err = New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res = v.Verify(context.Background(), []string{"a@[127.0.0.1]", "alice@loop.test", "alice@private.test", "alice@two.test", "alice@mixed.test"})
	if res[0].Reason != ReasonAccepted || res[1].Reason != ReasonAccepted || res[3].Reason != ReasonAccepted {
		t.Fatalf("with the allowance: %+v", res)
	}
	// A host with an allowed and a refused address is verified through the
	// allowed one (the refused one is never dialled): one stray address
	// must not make a real mail server a charged undeliverable.
	if res[4].Reason != ReasonAccepted {
		t.Fatalf("a mail host with an allowed and a refused address: %+v", res[4])
	}
	if res[2].Reason != ReasonNoMailServer {
		t.Fatalf("a private MX with a loopback allowance: %+v", res[2])
	}
	if srv.sessions.Load() == 0 {
		t.Fatal("with the allowance no session was opened")
	}
}

// TestRefusedMXCostsNoWait: an MX host on loopback that never sends its
// banner (a tarpit: a reached host costs CommandTimeout) answers at once
// when the policy refuses it, so the answer time does not tell whether
// anything listens there.
func TestRefusedMXCostsNoWait(t *testing.T) {
	srv := startScriptedSMTP(t, "220 unused", acceptAll)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(srv.port)))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.3:%d: %v", srv.port, err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	f := insideDNS(t)
	cfg := Config{DNSServer: f.addr, SMTPPort: srv.port, CommandTimeout: 1500 * time.Millisecond}
	v, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := v.VerifyOne(context.Background(), "alice@tarpit.test")
	t.Logf("refused tarpit answered in %v", time.Since(start))
	if el := time.Since(start); el > 300*time.Millisecond || r.Reason != ReasonNoMailServer {
		t.Fatalf("refused tarpit: %s after %v, want no_mail_server at once", r.Reason, el)
	}
	if len(accepted) != 0 {
		t.Fatal("the refused tarpit got a connection")
	}
	// Allowed, the same host costs the command timeout.
	cfg.Policy = loopbackAllowed
	v, err = New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if r := v.VerifyOne(context.Background(), "alice@tarpit.test"); r.Reason != ReasonTimeout || time.Since(start) < time.Second {
		t.Fatalf("allowed tarpit: %s after %v", r.Reason, time.Since(start))
	}
	t.Logf("allowed tarpit answered in %v", time.Since(start))
}

// TestDialSMTPControl: the SMTP dialer's last line refuses an address the
// policy does not allow even if a caller skipped the checks.
func TestDialSMTPControl(t *testing.T) {
	srv := startScriptedSMTP(t, "220 x", acceptAll)
	ip := netip.MustParseAddr("127.0.0.1")
	if c, err := dialSMTP(context.Background(), ip, srv.port, time.Second, nil); err == nil {
		c.Close()
		t.Fatal("dialled loopback with the default policy")
	}
	c, err := dialSMTP(context.Background(), ip, srv.port, time.Second, loopbackAllowed)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for srv.sessions.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.sessions.Load(); n != 1 {
		t.Fatalf("%d sessions, want 1 (the allowed dial)", n)
	}
}

// dialSMTP connects to ip:port directly (the default egress) within
// timeout (and ctx). ip was checked against pol before; pol's Control
// refuses anything else as a last line. Sessions dial through their egress
// (egress.Egress.Dial); this is that dial for the host's own route.
func dialSMTP(ctx context.Context, ip netip.Addr, port int, timeout time.Duration, pol *outbound.Policy) (net.Conn, error) {
	e := egress.Egress{Name: egress.DefaultName}
	return e.Dial(ctx, ip, port, timeout, pol)
}
