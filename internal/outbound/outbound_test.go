package outbound

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a tiny authoritative DNS server on a loopback UDP port. It
// answers A queries from its table, AAAA queries for known names with an
// empty answer, and everything else with NXDOMAIN.
type dnsServer struct {
	conn    net.PacketConn
	records map[string][4]byte // fully qualified lowercase name -> IPv4
	queries atomic.Int64
}

func startDNS(t *testing.T, records map[string][4]byte) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	s := &dnsServer{conn: pc, records: records}
	t.Cleanup(func() { pc.Close() })
	go s.serve()
	return s
}

func (s *dnsServer) addr() string { return s.conn.LocalAddr().String() }

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		s.queries.Add(1)
		if resp, err := s.answer(buf[:n]); err == nil {
			_, _ = s.conn.WriteTo(resp, from)
		}
	}
}

func (s *dnsServer) answer(req []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(q.Name.String())
	ip, known := s.records[name]
	rh := dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
	}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if known && q.Type == dnsmessage.TypeA {
		err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.AResource{A: ip})
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func TestResolverUsesConfiguredDNSServer(t *testing.T) {
	srv := startDNS(t, map[string][4]byte{"acme.example.": {192, 0, 2, 10}})
	r := Config{DNSServer: srv.addr(), Timeout: 2 * time.Second}.Resolver()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, "acme.example")
	if err != nil {
		t.Fatalf("LookupHost: %v", err)
	}
	if len(addrs) != 1 || addrs[0] != "192.0.2.10" {
		t.Fatalf("LookupHost = %v, want [192.0.2.10]", addrs)
	}
	if srv.queries.Load() == 0 {
		t.Fatal("test DNS server saw no query")
	}

	_, err = r.LookupHost(ctx, "missing.example")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("missing name: err = %v, want not-found DNSError", err)
	}
}

func TestDialerResolvesThroughDNSServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	srv := startDNS(t, map[string][4]byte{"svc.example.": {127, 0, 0, 1}})
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	// The test's server is on loopback: the operator's allowance opens it.
	d := Config{DNSServer: srv.addr(), Timeout: 2 * time.Second, Allow: LoopbackPrefixes}.Dialer()
	if d.Timeout != 2*time.Second {
		t.Fatalf("dialer timeout = %v", d.Timeout)
	}
	conn, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort("svc.example", port))
	if err != nil {
		t.Fatalf("Dial via test DNS: %v", err)
	}
	defer conn.Close()
	got, _ := io.ReadAll(conn)
	if string(got) != "hello" {
		t.Fatalf("read %q", got)
	}
}

func TestResolverUnreachableDNSServerFailsFast(t *testing.T) {
	// A UDP port nobody listens on: the lookup must fail within Timeout
	// rather than fall back to the system resolver.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	r := Config{DNSServer: addr, Timeout: 300 * time.Millisecond}.Resolver()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.LookupNetIP(ctx, "ip4", "acme.example"); err == nil {
		t.Fatal("lookup against a dead DNS server succeeded")
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("lookup took %v", el)
	}
}

// proxyServer is a forward HTTP proxy stand-in: it receives absolute-form
// requests and answers on behalf of the requested host.
func proxyServer(t *testing.T, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request: "+r.RequestURI, http.StatusBadRequest)
			return
		}
		switch r.Host {
		case "acme.example":
			_, _ = io.WriteString(w, "proxied "+r.Method+" "+r.URL.String())
		case "moved.example":
			http.Redirect(w, r, "http://elsewhere.example/", http.StatusMovedPermanently)
		default:
			http.Error(w, "unknown host "+r.Host, http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPClientUsesProxy(t *testing.T) {
	var hits atomic.Int64
	proxy := proxyServer(t, &hits)
	for _, p := range []string{proxy.URL, strings.TrimPrefix(proxy.URL, "http://")} {
		c := Config{HTTPProxy: p, Timeout: 2 * time.Second}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate(%q): %v", p, err)
		}
		resp, err := c.HTTPClient().Get("http://acme.example/path?q=1")
		if err != nil {
			t.Fatalf("GET via proxy %q: %v", p, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "proxied GET http://acme.example/path?q=1"; string(body) != want {
			t.Fatalf("body = %q, want %q", body, want)
		}
	}
	if hits.Load() != 2 {
		t.Fatalf("proxy hits = %d, want 2", hits.Load())
	}
}

func TestHTTPClientDoesNotFollowRedirects(t *testing.T) {
	var hits atomic.Int64
	proxy := proxyServer(t, &hits)
	resp, err := Config{HTTPProxy: proxy.URL}.HTTPClient().Get("http://moved.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "http://elsewhere.example/" {
		t.Fatalf("got %d Location=%q, want the 301 itself", resp.StatusCode, resp.Header.Get("Location"))
	}
	if hits.Load() != 1 {
		t.Fatalf("proxy hits = %d, want 1 (redirect must not be followed)", hits.Load())
	}
}

func TestHTTPClientProxyFromEnvironment(t *testing.T) {
	var hits atomic.Int64
	proxy := proxyServer(t, &hits)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	resp, err := Config{}.HTTPClient().Get("http://acme.example/env")
	if err != nil {
		t.Fatalf("GET via environment proxy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("status %d, proxy hits %d", resp.StatusCode, hits.Load())
	}
}

func TestHTTPClientInvalidProxyFailsClosed(t *testing.T) {
	c := Config{HTTPProxy: "ftp://proxy.example:21"}
	if err := c.Validate(); err == nil {
		t.Fatal("Validate accepted an ftp proxy")
	}
	_, err := c.HTTPClient().Get("http://acme.example/")
	if err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Fatalf("err = %v, want proxy error", err)
	}
}

func TestHTTPClientTimeouts(t *testing.T) {
	tr := Config{Timeout: 1500 * time.Millisecond}.HTTPClient().Transport.(*Transport).Direct
	if tr.TLSHandshakeTimeout != 1500*time.Millisecond || tr.ResponseHeaderTimeout != 1500*time.Millisecond {
		t.Fatalf("timeouts: tls %v header %v", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout)
	}

	// A proxy that never answers: the request fails after the response
	// header timeout.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer hang.Close()
	start := time.Now()
	_, err := Config{HTTPProxy: hang.URL, Timeout: 200 * time.Millisecond}.HTTPClient().Get("http://acme.example/")
	if err == nil {
		t.Fatal("request to a hanging server succeeded")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("request took %v, want about 200ms", el)
	}
}

func TestDefaultsAndValidate(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.SMTPPort != 25 || c.Timeout != 5*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
	if got := (Config{}).SMTPAddr("mx.acme.example"); got != "mx.acme.example:25" {
		t.Fatalf("SMTPAddr = %q", got)
	}
	if got := (Config{SMTPPort: 2525}).SMTPAddr("::1"); got != "[::1]:2525" {
		t.Fatalf("SMTPAddr = %q", got)
	}
	for _, s := range []string{"127.0.0.1", "::1", "[::1]", "dns.example"} {
		c := Config{DNSServer: s}
		if err := c.Validate(); err != nil {
			t.Errorf("Validate DNSServer %q: %v", s, err)
		}
		if _, err := netip.ParseAddrPort(c.dnsServer()); err != nil && s != "dns.example" {
			t.Errorf("dnsServer(%q) = %q", s, c.dnsServer())
		}
	}
	for _, c := range []Config{{SMTPPort: 70000}, {Timeout: -1}, {HTTPProxy: "http://"}, {DNSServer: ":53"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", c)
		}
	}
}
