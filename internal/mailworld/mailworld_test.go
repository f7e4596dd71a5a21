package mailworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Short timings so the suite stays fast.
var testOpts = ClassOptions{Greylist: 400 * time.Millisecond, Tarpit: time.Second}

func start(t *testing.T, spec Spec) *World {
	t.Helper()
	w, err := Start(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w
}

func query(t *testing.T, w *World, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	r, err := exchange(w, netw, name, qtype, 2*time.Second)
	if err != nil {
		t.Fatalf("%s %s %s: %v", netw, name, dns.TypeToString[qtype], err)
	}
	return r
}

func exchange(w *World, netw, name string, qtype uint16, timeout time.Duration) (*dns.Msg, error) {
	c := &dns.Client{Net: netw, Timeout: timeout}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	r, _, err := c.Exchange(m, w.DNSAddr())
	return r, err
}

func TestDNS(t *testing.T) {
	w := start(t, Classes(testOpts))
	for _, netw := range []string{"udp", "tcp"} {
		r := query(t, w, netw, "ok.test", dns.TypeMX)
		if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 {
			t.Fatalf("%s ok.test MX: %v", netw, r)
		}
		mx := r.Answer[0].(*dns.MX)
		if mx.Mx != "mx.ok.test." || mx.Preference != 10 || mx.Hdr.Ttl != 300 {
			t.Errorf("ok.test MX = %v", mx)
		}
		if len(r.Extra) == 0 {
			t.Errorf("ok.test MX: no additional A records")
		}
	}
	// A record of a host.
	r := query(t, w, "udp", "MX.OK.TEST", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != w.HostIP("mx.ok.test") {
		t.Errorf("mx.ok.test A: %v", r)
	}
	if ip := w.HostIP("mx.ok.test"); !strings.HasPrefix(ip, "127.1.") {
		t.Errorf("HostIP = %q", ip)
	}
	// AAAA: empty NOERROR with an SOA.
	r = query(t, w, "udp", "mx.ok.test", dns.TypeAAAA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("mx.ok.test AAAA: %v", r)
	}
	// Backup MX: two records in order.
	r = query(t, w, "udp", "backup.test", dns.TypeMX)
	var got []string
	for _, rr := range r.Answer {
		mx := rr.(*dns.MX)
		got = append(got, fmt.Sprint(mx.Preference, " ", mx.Mx))
	}
	if want := []string{"10 mx1.backup.test.", "20 mx2.backup.test."}; !reflect.DeepEqual(got, want) {
		t.Errorf("backup.test MX = %v, want %v", got, want)
	}
	// Null MX.
	r = query(t, w, "udp", "nullmx.test", dns.TypeMX)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.MX).Mx != "." || r.Answer[0].(*dns.MX).Preference != 0 {
		t.Errorf("nullmx.test MX: %v", r)
	}
	// No MX, but an A record pointing at the host.
	r = query(t, w, "udp", "implicit.test", dns.TypeMX)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("implicit.test MX: %v", r)
	}
	r = query(t, w, "udp", "implicit.test", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != w.HostIP("web.implicit.test") {
		t.Errorf("implicit.test A: %v", r)
	}
	// No mail: exists (TXT) but no MX and no A.
	for _, qt := range []uint16{dns.TypeMX, dns.TypeA, dns.TypeAAAA} {
		r = query(t, w, "udp", "nomail.test", qt)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("nomail.test %s: %v", dns.TypeToString[qt], r)
		}
	}
	r = query(t, w, "udp", "nomail.test", dns.TypeTXT)
	if len(r.Answer) != 1 {
		t.Errorf("nomail.test TXT: %v", r)
	}
	// NXDOMAIN, for the listed domain and for names nobody listed.
	for _, name := range []string{"nxdomain.test", "nowhere.test", "x.ok.test"} {
		r = query(t, w, "udp", name, dns.TypeMX)
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Errorf("%s: %v", name, r)
		}
	}
	// SERVFAIL.
	r = query(t, w, "tcp", "servfail.test", dns.TypeMX)
	if r.Rcode != dns.RcodeServerFailure {
		t.Errorf("servfail.test: %v", r)
	}
	// Timeout: no answer at all.
	t0 := time.Now()
	if r, err := exchange(w, "udp", "dnstimeout.test", dns.TypeMX, 300*time.Millisecond); err == nil {
		t.Errorf("dnstimeout.test answered: %v", r)
	} else if d := time.Since(t0); d < 250*time.Millisecond {
		t.Errorf("dnstimeout.test failed after %v (%v), want a timeout", d, err)
	}

	// Go's own resolver pointed at the world, as a verifier may use it.
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, w.DNSAddr())
	}}
	mxs, err := res.LookupMX(t.Context(), "shared-a.test")
	if err != nil || len(mxs) != 1 || mxs[0].Host != "mx.provider.test." {
		t.Errorf("LookupMX(shared-a.test) = %v, %v", mxs, err)
	}
	_, err = res.LookupMX(t.Context(), "nxdomain.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Errorf("LookupMX(nxdomain.test) err = %v, want not found", err)
	}
}

// smtpConn is a client session for the tests.
type smtpConn struct {
	t *testing.T
	c net.Conn
	*textproto.Conn
}

func dial(t *testing.T, w *World, host string) *smtpConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(w.HostIP(host), strconv.Itoa(w.SMTPPort())), 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return &smtpConn{t, c, textproto.NewConn(c)}
}

// cmd sends a command and checks that the reply starts with want
// ("250 2.1.5", "550 5.1.1", ...); it returns the whole reply.
func (s *smtpConn) cmd(line, want string) string {
	s.t.Helper()
	if line != "" {
		if err := s.PrintfLine("%s", line); err != nil {
			s.t.Fatalf("%s: %v", line, err)
		}
	}
	return s.expect(line, want)
}

func (s *smtpConn) expect(what, want string) string {
	s.t.Helper()
	code, msg, err := s.ReadResponse(0)
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
	got := fmt.Sprintf("%d %s", code, msg)
	if !strings.HasPrefix(got, want) {
		s.t.Fatalf("%s: got %q, want %q...", what, got, want)
	}
	return got
}

func (s *smtpConn) hello() {
	s.t.Helper()
	s.expect("banner", "220 ")
	s.cmd("EHLO client.test", "250 ")
}

func TestSMTPDialogue(t *testing.T) {
	w := start(t, Classes(testOpts))
	s := dial(t, w, "mx.ok.test")
	s.expect("banner", "220 mx.ok.test ESMTP mailworld")
	s.cmd("RCPT TO:<alice@ok.test>", "503 5.5.1")
	ehlo := s.cmd("EHLO client.test", "250 mx.ok.test")
	for _, ext := range []string{"PIPELINING", "ENHANCEDSTATUSCODES", "SIZE 35882577", "8BITMIME"} {
		if !strings.Contains(ehlo, ext) {
			t.Errorf("EHLO reply %q lacks %s", ehlo, ext)
		}
	}
	s.cmd("MAIL FROM:<check@verifier.test>", "250 2.1.0")
	s.cmd("RCPT TO:<alice@ok.test>", "250 2.1.5")
	s.cmd("RCPT TO:<ALICE@OK.TEST.>", "250 2.1.5")
	s.cmd("rcpt to: <Carol@ok.test> NOTIFY=NEVER", "250 2.1.5")
	s.cmd("RCPT TO:<nobody@ok.test>", "550 5.1.1")
	s.cmd("RCPT TO:<alice@catchall.test>", "550 5.7.1")
	s.cmd("RCPT TO:<alice@nowhere.test>", "550 5.7.1")
	s.cmd("RCPT TO:<>", "501 5.1.3")
	s.cmd("NOOP", "250 2.0.0")
	s.cmd("VRFY alice", "252")
	s.cmd("STARTTLS", "500 5.5.2")
	s.cmd("DATA", "354")
	s.cmd("Subject: hi\r\n\r\nhello\r\n.", "250 2.0.0")
	s.cmd("RSET", "250 2.0.0")
	s.cmd("RCPT TO:<alice@ok.test>", "503 5.5.1")
	s.cmd("MAIL FROM:<>", "250 2.1.0")
	s.cmd("DATA", "503 5.5.1")
	s.cmd("QUIT", "221 2.0.0")
	if _, err := s.ReadLine(); err != io.EOF {
		t.Errorf("after QUIT: %v, want EOF", err)
	}

	s = dial(t, w, "mx.provider.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<max@full.test>", "552 5.2.2 Mailbox full")
	s.cmd("RCPT TO:<alice@full.test>", "250 2.1.5")
	s.cmd("RCPT TO:<old@disabled.test>", "550 5.2.1 Mailbox disabled")
	s.cmd("RCPT TO:<bob@shared-b.test>", "250 2.1.5")
	s.cmd("RCPT TO:<carol@shared-b.test>", "550 5.1.1 User unknown")
	s.cmd("RCPT TO:<alice@ok.test>", "550 5.7.1 Relaying denied")

	s = dial(t, w, "mx.catchall.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<zq81-random@catchall.test>", "250 2.1.5")

	s = dial(t, w, "web.implicit.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<alice@implicit.test>", "250 2.1.5")

	s = dial(t, w, "mx.nopipe.test")
	s.expect("banner", "220 ")
	if ehlo := s.cmd("EHLO client.test", "250 "); strings.Contains(ehlo, "PIPELINING") {
		t.Errorf("mx.nopipe.test advertises PIPELINING: %q", ehlo)
	}
	s.cmd("HELO client.test", "250 mx.nopipe.test")
}

func TestGreylist(t *testing.T) {
	w := start(t, Classes(testOpts))
	s := dial(t, w, "mx.grey.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	t0 := time.Now()
	s.cmd("RCPT TO:<alice@grey.test>", "450 4.7.1")
	s.cmd("RCPT TO:<alice@grey.test>", "450 4.7.1")
	s.cmd("RCPT TO:<ghost@grey.test>", "450 4.7.1")
	time.Sleep(testOpts.Greylist - time.Since(t0) + 50*time.Millisecond)
	s.cmd("RCPT TO:<alice@grey.test>", "250 2.1.5")
	s.cmd("RCPT TO:<ghost@grey.test>", "550 5.1.1")
	// A recipient seen for the first time now is greylisted from now on.
	s.cmd("RCPT TO:<bob@grey.test>", "450 4.7.1")
	if st := w.Stats(); st.Greylisted != 4 || st.PerHost["mx.grey.test"].Greylisted != 4 {
		t.Errorf("Greylisted = %d, want 4", st.Greylisted)
	}
}

func TestMaxConns(t *testing.T) {
	w := start(t, Classes(testOpts))
	first := dial(t, w, "mx.limited.test")
	first.hello()
	second := dial(t, w, "mx.limited.test")
	second.expect("banner", "421 4.7.0 Too many concurrent connections")
	if _, err := second.ReadLine(); err == nil {
		t.Errorf("the 421 connection stays open")
	}
	// A polite client: QUIT, read 221, connect again at once.
	for range 5 {
		first.cmd("QUIT", "221")
		first = dial(t, w, "mx.limited.test")
		first.hello()
	}
	st := w.Stats()
	if st.Rejected421 != 1 || st.PerHost["mx.limited.test"].Rejected421 != 1 {
		t.Errorf("Rejected421 = %d, want 1", st.Rejected421)
	}
	if st.PerHost["mx.limited.test"].Sessions != 7 || st.Sessions != 7 {
		t.Errorf("Sessions = %d, want 7", st.Sessions)
	}
	if got := st.MaxConcurrent["mx.limited.test"]; got != 2 {
		t.Errorf("MaxConcurrent = %d, want 2 (the admitted one and the refused one)", got)
	}
	w.ResetStats()
	st = w.Stats()
	if st.Sessions != 0 || st.Rejected421 != 0 || st.MaxConcurrent["mx.limited.test"] != 1 {
		t.Errorf("after ResetStats: %+v", st)
	}
	// A client that closes without QUIT gets its slot back as soon as the
	// server notices.
	first.c.Close()
	third := dial(t, w, "mx.limited.test")
	third.expect("banner", "220 ")
}

func TestMaxRcpts(t *testing.T) {
	w := start(t, Classes(testOpts))
	s := dial(t, w, "mx.many.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<r1@many.test>", "250 2.1.5")
	s.cmd("RCPT TO:<x1@many.test>", "550 5.1.1")
	s.cmd("RCPT TO:<r2@many.test>", "250 2.1.5")
	s.cmd("RCPT TO:<r3@many.test>", "452 4.5.3 Too many recipients")
	s.cmd("RSET", "250")
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<r3@many.test>", "452 4.5.3")
	s = dial(t, w, "mx.many.test")
	s.hello()
	s.cmd("MAIL FROM:<>", "250")
	s.cmd("RCPT TO:<r3@many.test>", "250 2.1.5")
	if st := w.Stats(); st.Replies452 != 2 || st.Rcpts != 6 {
		t.Errorf("Replies452 = %d, Rcpts = %d, want 2 and 6", st.Replies452, st.Rcpts)
	}
}

func TestPipeliningCostsOneRTT(t *testing.T) {
	w := start(t, Classes(testOpts))
	const rtt = 150 * time.Millisecond
	w.SetRTT(rtt)
	t0 := time.Now()
	s := dial(t, w, "mx.ok.test")
	s.expect("banner", "220 ")
	if d := time.Since(t0); d < rtt {
		t.Errorf("banner after %v, want >= %v", d, rtt)
	}
	s.cmd("EHLO client.test", "250 ")
	t0 = time.Now()
	if _, err := s.c.Write([]byte("MAIL FROM:<>\r\nRCPT TO:<alice@ok.test>\r\nRCPT TO:<nobody@ok.test>\r\nRCPT TO:<bob@ok.test>\r\n")); err != nil {
		t.Fatal(err)
	}
	s.expect("MAIL", "250 2.1.0")
	s.expect("RCPT alice", "250 2.1.5")
	s.expect("RCPT nobody", "550 5.1.1")
	s.expect("RCPT bob", "250 2.1.5")
	// One RTT; answering in lock-step would take four.
	if d := time.Since(t0); d < rtt || d >= 2*rtt {
		t.Errorf("pipelined group answered after %v, want about one RTT (%v)", d, rtt)
	}
	// Without pipelining every command waits a round trip.
	t0 = time.Now()
	s.cmd("RSET", "250")
	s.cmd("MAIL FROM:<>", "250")
	if d := time.Since(t0); d < 2*rtt {
		t.Errorf("two lock-step commands took %v, want >= %v", d, 2*rtt)
	}
	w.SetRTT(0)
	t0 = time.Now()
	s.cmd("NOOP", "250")
	if d := time.Since(t0); d >= rtt {
		t.Errorf("NOOP after SetRTT(0) took %v", d)
	}
}

func TestDropRefuseTarpit(t *testing.T) {
	w := start(t, Classes(testOpts))
	// Dropped at the first RCPT: replies owed before it still arrive.
	s := dial(t, w, "mx.dropped.test")
	s.hello()
	if err := s.PrintfLine("MAIL FROM:<>\r\nRCPT TO:<alice@dropped.test>"); err != nil {
		t.Fatal(err)
	}
	s.expect("MAIL", "250 2.1.0")
	if code, msg, err := s.ReadResponse(0); err == nil {
		t.Errorf("RCPT on mx.dropped.test answered %d %s, want the connection dropped", code, msg)
	}

	// Refused: nothing listens on the host's address.
	for _, h := range []string{"mx.refused.test", "mx1.backup.test"} {
		_, err := net.DialTimeout("tcp", net.JoinHostPort(w.HostIP(h), strconv.Itoa(w.SMTPPort())), time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial %s: %v, want connection refused", h, err)
		}
	}
	// Nor can anything else listen there meanwhile.
	if l, err := net.Listen("tcp4", net.JoinHostPort(w.HostIP("mx.refused.test"), strconv.Itoa(w.SMTPPort()))); err == nil {
		l.Close()
		t.Errorf("could listen on the refused host's address")
	}

	// Tarpit: the banner comes after the tarpit, later than a short deadline.
	s = dial(t, w, "mx.tarpit.test")
	_ = s.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var ne net.Error
	if _, err := s.ReadLine(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("tarpit banner: %v, want a timeout", err)
	}
}

// TestDropsBlocksWorld: the drop-after-K hosts answer K RCPTs and drop at
// the next one; the blocking host answers every RCPT with a DNSBL block of
// the client's IP; both are counted.
func TestDropsBlocksWorld(t *testing.T) {
	spec := DropsBlocks(DropsBlocksOptions{Drops: 30, Blocked: 4})
	checkCases(t, spec)
	w := start(t, spec)
	for k := 1; k <= 3; k++ {
		host := fmt.Sprintf("mx.drop-%03d.test", k)
		s := dial(t, w, host)
		s.hello()
		cmds := "MAIL FROM:<>"
		for i := range k + 1 {
			cmds += fmt.Sprintf("\r\nRCPT TO:<u%02d@drop-%03d.test>", i+1, k)
		}
		if err := s.PrintfLine("%s", cmds); err != nil {
			t.Fatal(err)
		}
		s.expect("MAIL", "250 2.1.0")
		for i := range k {
			if code, msg, err := s.ReadResponse(0); err != nil || (code != 250 && code != 550) {
				t.Errorf("%s: RCPT %d: %d %s %v", host, i+1, code, msg, err)
			}
		}
		if code, msg, err := s.ReadResponse(0); err == nil {
			t.Errorf("%s: RCPT %d answered %d %s, want the connection dropped", host, k+1, code, msg)
		}
		if d := w.Stats().PerHost[host].Drops; d != 1 {
			t.Errorf("%s: %d drops counted", host, d)
		}
	}
	s := dial(t, w, "mx.blocked.test")
	s.hello()
	if err := s.PrintfLine("MAIL FROM:<>\r\nRCPT TO:<b01@blocked.test>"); err != nil {
		t.Fatal(err)
	}
	s.expect("MAIL", "250 2.1.0")
	s.expect("RCPT", "554 5.7.1 Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org")
	if b := w.Stats().PerHost["mx.blocked.test"].Blocks; b != 1 {
		t.Errorf("%d blocks counted", b)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	w, err := Start(context.Background(), Classes(testOpts))
	if err != nil {
		t.Fatal(err)
	}
	s := dial(t, w, "mx.ok.test")
	s.hello()
	tarpitted := dial(t, w, "mx.tarpit.test") // its session is asleep in the tarpit
	t0 := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
	if _, err := s.ReadLine(); err == nil {
		t.Errorf("open session survived Close")
	}
	if _, err := tarpitted.ReadLine(); err == nil {
		t.Errorf("tarpitted session survived Close")
	}
	for _, h := range []string{"mx.ok.test", "mx.provider.test", "mx.limited.test"} {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(w.HostIP(h), strconv.Itoa(w.SMTPPort())), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", h)
		}
	}
	if c, err := net.DialTimeout("tcp", w.DNSAddr(), time.Second); err == nil {
		c.Close()
		t.Errorf("DNS still accepts TCP after Close")
	}
	if r, err := exchange(w, "udp", "ok.test", dns.TypeMX, 300*time.Millisecond); err == nil {
		t.Errorf("DNS still answers after Close: %v", r)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before Start", n, before)
	}
}

func TestContextCancelCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := Start(ctx, Demo())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort(w.HostIP("mx.acme.test"), strconv.Itoa(w.SMTPPort()))); err == nil {
		c.Close()
		t.Errorf("still listening after the context ended")
	}
}

func TestTwoWorldsSideBySide(t *testing.T) {
	a := start(t, Demo())
	b := start(t, Demo())
	if a.SMTPPort() == b.SMTPPort() || a.DNSAddr() == b.DNSAddr() {
		t.Fatalf("two worlds share a port: %d/%s and %d/%s", a.SMTPPort(), a.DNSAddr(), b.SMTPPort(), b.DNSAddr())
	}
	if a.HostIP("mx.acme.test") != b.HostIP("mx.acme.test") {
		t.Errorf("host IPs differ between worlds of the same spec")
	}
	s := dial(t, b, "mx.acme.test")
	s.hello()
}

func TestSpecErrors(t *testing.T) {
	for name, spec := range map[string]Spec{
		"unknown MX host": {Domains: []Domain{{Name: "a.test", MX: []string{"mx.nowhere.test"}}}},
		"no MX":           {Domains: []Domain{{Name: "a.test"}}},
		"not loopback":    {Hosts: []Host{{Name: "mx.a.test", IP: "10.0.0.1"}}},
		"same IP":         {Hosts: []Host{{Name: "mx1.a.test", IP: "127.1.9.9"}, {Name: "mx2.a.test", IP: "127.1.9.9"}}},
		"host twice":      {Hosts: []Host{{Name: "mx.a.test"}, {Name: "MX.a.test"}}},
	} {
		if w, err := Start(t.Context(), spec); err == nil {
			w.Close()
			t.Errorf("%s: Start accepted the spec", name)
		}
	}
	w := start(t, Spec{Hosts: []Host{{Name: "mx.a.test", IP: "127.3.2.1"}, {Name: "mx.b.test"}},
		Domains: []Domain{{Name: "a.test", MX: []string{"mx.a.test"}, Users: []string{"x"}}}})
	if w.HostIP("mx.a.test") != "127.3.2.1" || w.HostIP("mx.b.test") != "127.1.0.1" {
		t.Errorf("HostIPs = %s, %s", w.HostIP("mx.a.test"), w.HostIP("mx.b.test"))
	}
}

var reasons = map[string][]string{
	Deliverable:   {"accepted"},
	Undeliverable: {"invalid_syntax", "no_such_domain", "null_mx", "no_mail_server", "mailbox_not_found", "mailbox_disabled", "rejected"},
	Risky:         {"catch_all", "mailbox_full", "disposable"},
	Unknown:       {"greylisted", "dns_error", "connection_failed", "timeout", "temporary_failure", "rate_limited", "smtp_error", "blocked"},
}

func checkCases(t *testing.T, spec Spec) {
	t.Helper()
	domains := map[string]bool{}
	for _, d := range spec.Domains {
		domains[d.Name] = true
	}
	seen := map[string]bool{}
	for _, c := range spec.Cases {
		if !slices.Contains(reasons[c.Status], c.Reason) {
			t.Errorf("%s: status %q reason %q is not an agreed pair", c.Email, c.Status, c.Reason)
		}
		if seen[strings.ToLower(c.Email)] {
			t.Errorf("%s listed twice", c.Email)
		}
		seen[strings.ToLower(c.Email)] = true
		if at := strings.LastIndexByte(c.Email, '@'); c.Reason != "invalid_syntax" && (at < 0 || !domains[strings.ToLower(c.Email[at+1:])]) {
			t.Errorf("%s: domain not in the spec", c.Email)
		}
	}
}

func TestBench(t *testing.T) {
	spec := Bench(BenchOptions{Seed: 7})
	if !reflect.DeepEqual(spec, Bench(BenchOptions{Seed: 7})) {
		t.Fatal("Bench is not deterministic for a seed")
	}
	if reflect.DeepEqual(spec.Cases, Bench(BenchOptions{Seed: 8}).Cases) {
		t.Error("Bench ignores the seed")
	}
	if len(spec.Domains) != 200 || len(spec.Cases) != 2000 || spec.RTT != 50*time.Millisecond {
		t.Fatalf("Bench: %d domains, %d cases, RTT %v", len(spec.Domains), len(spec.Cases), spec.RTT)
	}
	checkCases(t, spec)
	byReason := map[string]int{}
	for _, c := range spec.Cases {
		byReason[c.Reason]++
	}
	t.Logf("hosts %d, reasons %v", len(spec.Hosts), byReason)
	if byReason["mailbox_not_found"] < 200 || byReason["accepted"] < 1000 || byReason["catch_all"] == 0 ||
		byReason["null_mx"] == 0 || byReason["no_such_domain"] == 0 || byReason["mailbox_full"] == 0 || byReason["mailbox_disabled"] == 0 {
		t.Errorf("unexpected mix: %v", byReason)
	}
	shared := map[string]int{}
	greyDomains := 0
	for _, d := range spec.Domains {
		if d.Greylist > 0 {
			greyDomains++
		}
		for _, mx := range d.MX {
			shared[mx]++
		}
	}
	var multi int
	for _, n := range shared {
		if n > 1 {
			multi += n
		}
	}
	if multi < 50 || multi > 110 || greyDomains == 0 {
		t.Errorf("%d domains on shared hosts, %d greylisting", multi, greyDomains)
	}
	for _, h := range spec.Hosts {
		if h.MaxConns != 3 || h.MaxRcpts != 100 {
			t.Fatalf("host %+v", h)
		}
	}
	w := start(t, spec)
	w.SetRTT(0)
	// Greylisting domains are left out below: their period is 2s.
	grey := map[string]bool{}
	for _, d := range spec.Domains {
		if d.Greylist > 0 {
			grey[d.Name] = true
		}
	}
	// Every case through the reference verifier, 24 at a time, at most
	// MaxConns sessions per host like a polite verifier: every answer is
	// exact and no session is refused.
	gates := map[string]chan struct{}{}
	for _, h := range spec.Hosts {
		gates[w.HostIP(h.Name)] = make(chan struct{}, h.MaxConns)
	}
	gate := func(ip string) func() {
		g := gates[ip]
		g <- struct{}{}
		return func() { <-g }
	}
	work := make(chan Case)
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for c := range work {
				if status, reason := refVerify(w, c.Email, gate); status != c.Status || reason != c.Reason {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: reference verifier says %s/%s, case says %s/%s", c.Email, status, reason, c.Status, c.Reason))
					mu.Unlock()
				}
			}
		})
	}
	for _, c := range spec.Cases {
		if !grey[c.Email[strings.LastIndexByte(c.Email, '@')+1:]] {
			work <- c
		}
	}
	close(work)
	wg.Wait()
	for _, s := range wrong {
		t.Error(s)
	}
	st := w.Stats()
	if st.Rejected421 != 0 || st.Replies452 != 0 {
		t.Errorf("a polite verifier got %d 421s and %d 452s", st.Rejected421, st.Replies452)
	}
	busiest := 0
	for h, n := range st.MaxConcurrent {
		if n > 3 {
			t.Errorf("%s saw %d concurrent sessions", h, n)
		}
		busiest = max(busiest, n)
	}
	if busiest != 3 || st.Sessions < 1500 {
		t.Errorf("busiest host saw %d concurrent sessions; %d sessions in all", busiest, st.Sessions)
	}
	c := spec.Cases[0]
	if got, ok := w.Expect(strings.ToUpper(c.Email)); !ok || got != c {
		t.Errorf("Expect(%s) = %v, %v", c.Email, got, ok)
	}
	if len(w.Cases()) != 2000 {
		t.Errorf("Cases() = %d", len(w.Cases()))
	}
}

// TestCasesAgreeWithTheWorld runs a minimal reference verifier over every
// case of Classes (and Demo) and checks that it reaches the expected answer:
// the expectations and the servers cannot drift apart.
func TestCasesAgreeWithTheWorld(t *testing.T) {
	for name, spec := range map[string]Spec{"classes": Classes(testOpts), "demo": Demo()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkCases(t, spec)
			w := start(t, spec)
			for _, c := range w.Cases() {
				if name == "demo" && strings.HasSuffix(c.Email, "@grey.test") {
					continue // 20s greylist
				}
				status, reason := refVerify(w, c.Email, nil)
				if status != c.Status || reason != c.Reason {
					t.Errorf("%s: reference verifier says %s/%s, case says %s/%s", c.Email, status, reason, c.Status, c.Reason)
				}
			}
		})
	}
}

func refVerify(w *World, email string, gate func(ip string) (release func())) (status, reason string) {
	at := strings.LastIndexByte(email, '@')
	if at <= 0 || at == len(email)-1 || strings.Count(email, "@") != 1 {
		return Undeliverable, "invalid_syntax"
	}
	domain := email[at+1:]
	r, err := exchange(w, "udp", domain, dns.TypeMX, 300*time.Millisecond)
	if err != nil {
		return Unknown, "dns_error"
	}
	switch r.Rcode {
	case dns.RcodeNameError:
		return Undeliverable, "no_such_domain"
	case dns.RcodeSuccess:
	default:
		return Unknown, "dns_error"
	}
	var mxs []*dns.MX
	for _, rr := range r.Answer {
		if mx, ok := rr.(*dns.MX); ok {
			if mx.Mx == "." {
				return Undeliverable, "null_mx"
			}
			mxs = append(mxs, mx)
		}
	}
	sort.Slice(mxs, func(i, j int) bool { return mxs[i].Preference < mxs[j].Preference })
	var hosts []string
	for _, mx := range mxs {
		hosts = append(hosts, mx.Mx)
	}
	if len(hosts) == 0 {
		hosts = []string{domain}
	}
	var ips []string
	for _, h := range hosts {
		r, err := exchange(w, "udp", h, dns.TypeA, time.Second)
		if err != nil {
			return Unknown, "dns_error"
		}
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				ips = append(ips, a.A.String())
			}
		}
	}
	if len(ips) == 0 {
		return Undeliverable, "no_mail_server"
	}
	for _, ip := range ips {
		release := func() {}
		if gate != nil {
			release = gate(ip)
		}
		status, reason, connected := refSMTP(w, ip, email, domain, true)
		release()
		if connected {
			return status, reason
		}
	}
	return Unknown, "connection_failed"
}

func refSMTP(w *World, ip, email, domain string, retryGreylist bool) (status, reason string, connected bool) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(w.SMTPPort())), 300*time.Millisecond)
	if err != nil {
		return "", "", false
	}
	defer c.Close()
	tc := textproto.NewConn(c)
	fail := func(err error) (string, string, bool) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return Unknown, "timeout", true
		}
		return Unknown, "smtp_error", true
	}
	step := func(line string) (int, string, error) {
		_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if line != "" {
			if err := tc.PrintfLine("%s", line); err != nil {
				return 0, "", err
			}
		}
		return tc.ReadResponse(0)
	}
	for _, line := range []string{"", "EHLO verifier.test", "MAIL FROM:<>"} {
		if code, _, err := step(line); err != nil {
			return fail(err)
		} else if code/100 != 2 {
			return Unknown, "smtp_error", true
		}
	}
	code, msg, err := step("RCPT TO:<" + email + ">")
	if err != nil {
		return fail(err)
	}
	switch {
	case code == 250:
		probe, _, err := step("RCPT TO:<no-such-user-zz81q@" + domain + ">")
		if err == nil && probe == 250 {
			return Risky, "catch_all", true
		}
		return Deliverable, "accepted", true
	case code == 450 && retryGreylist:
		step("QUIT")
		time.Sleep(testOpts.Greylist + 50*time.Millisecond)
		return refSMTP(w, ip, email, domain, false)
	case code == 450:
		return Unknown, "greylisted", true
	case strings.HasPrefix(msg, "5.1.1"):
		return Undeliverable, "mailbox_not_found", true
	case strings.HasPrefix(msg, "5.2.1"):
		return Undeliverable, "mailbox_disabled", true
	case strings.HasPrefix(msg, "5.2.2"):
		return Risky, "mailbox_full", true
	case code/100 == 5:
		return Undeliverable, "rejected", true
	}
	return Unknown, "temporary_failure", true
}
