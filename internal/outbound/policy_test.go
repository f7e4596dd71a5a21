package outbound

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server on 127.0.0.1 that counts the
// connections it accepts and never answers a request until the test ends
// (so a client that reaches it waits for its timeout).
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
	port  string
}

func startCounting(t *testing.T) *countingServer {
	t.Helper()
	s := &countingServer{}
	done := make(chan struct{})
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(func() { close(done); s.Close() })
	_, s.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}

// fakeResolver answers names from a table (for answers the tiny DNS server
// of outbound_test.go cannot give: several addresses, AAAA).
type fakeResolver map[string][]string

func (f fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	as, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range as {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

// TestDialerRefusesInternalTargets: a name resolving to loopback (through a
// real DNS server), loopback literals in every form, localhost from the
// hosts file, and names with one internal address among public ones get no
// connection, and are refused at once; the operator's allowance makes the
// same loopback server reachable.
func TestDialerRefusesInternalTargets(t *testing.T) {
	srv := startCounting(t)
	dns := startDNS(t, map[string][4]byte{"loop.example.": {127, 0, 0, 1}, "meta.example.": {169, 254, 169, 254}})
	d := Config{DNSServer: dns.addr(), Timeout: 3 * time.Second}.Dialer()
	targets := []string{"loop.example", "meta.example", "127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "0.0.0.0", "localhost"}
	for _, host := range targets {
		start := time.Now()
		c, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort(host, srv.port))
		if err == nil {
			c.Close()
			t.Errorf("dial %s: connected", host)
			continue
		}
		var re *RefusedError
		if !errors.Is(err, ErrRefused) || !errors.As(err, &re) {
			t.Errorf("dial %s: %v, want a refusal", host, err)
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Errorf("dial %s: refused after %v, want at once", host, el)
		}
	}
	fake := &Dialer{Resolver: fakeResolver{
		"mixed.example":  {"93.184.216.34", "127.0.0.1"},
		"mapped.example": {"::ffff:127.0.0.1"},
		"compat.example": {"::7f00:1"},
		"ula.example":    {"2606:4700::1111", "fd00::1"},
	}, Timeout: 3 * time.Second}
	for _, host := range []string{"mixed.example", "mapped.example", "compat.example", "ula.example"} {
		if _, err := fake.DialContext(context.Background(), "tcp", net.JoinHostPort(host, srv.port)); !errors.Is(err, ErrRefused) {
			t.Errorf("dial %s: %v, want a refusal", host, err)
		}
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the loopback server", n)
	}
	// A name that does not exist is the resolver's error, not a refusal.
	if _, err := d.DialContext(context.Background(), "tcp", "gone.example:80"); errors.Is(err, ErrRefused) {
		t.Fatalf("NXDOMAIN: %v", err)
	} else if de := (*net.DNSError)(nil); !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("NXDOMAIN: %v, want a not-found DNSError", err)
	}

	// The allowance opens loopback, and only that.
	open := Config{DNSServer: dns.addr(), Timeout: 3 * time.Second, Allow: LoopbackPrefixes}.Dialer()
	for _, host := range []string{"loop.example", "127.0.0.1"} {
		c, err := open.DialContext(context.Background(), "tcp", net.JoinHostPort(host, srv.port))
		if err != nil {
			t.Fatalf("allowed dial %s: %v", host, err)
		}
		c.Close()
	}
	if _, err := open.DialContext(context.Background(), "tcp", net.JoinHostPort("meta.example", "80")); !errors.Is(err, ErrRefused) {
		t.Fatalf("metadata address with a loopback allowance: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for srv.conns.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Fatalf("%d connections with the allowance, want 2", n)
	}
}

// TestDialerDialsTheCheckedAddress: the name is looked up once and the
// address that was checked is dialled; a DNS answer that changes after the
// check (rebinding) is never asked for.
func TestDialerDialsTheCheckedAddress(t *testing.T) {
	srv := startCounting(t)
	var mu sync.Mutex
	lookups := 0
	r := resolverFunc(func(ctx context.Context, host string) ([]net.IPAddr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups == 1 {
			return []net.IPAddr{{IP: net.ParseIP("127.0.0.1")}}, nil
		}
		return []net.IPAddr{{IP: net.ParseIP("10.0.0.1")}}, nil
	})
	d := &Dialer{Resolver: r, Policy: &Policy{Allow: LoopbackPrefixes}, Timeout: 2 * time.Second}
	c, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.example", srv.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.1" || lookups != 1 {
		t.Fatalf("connected to %s after %d lookups; want 127.0.0.1 after 1", got, lookups)
	}
}

type resolverFunc func(ctx context.Context, host string) ([]net.IPAddr, error)

func (f resolverFunc) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	return f(ctx, host)
}

// TestControlIsTheLastLine: the dialer's Control refuses an address the
// policy does not allow even when a caller dials it directly.
func TestControlIsTheLastLine(t *testing.T) {
	srv := startCounting(t)
	nd := &net.Dialer{Timeout: time.Second, Control: (*Policy)(nil).Control}
	if _, err := nd.Dial("tcp", net.JoinHostPort("127.0.0.1", srv.port)); !errors.Is(err, ErrRefused) {
		t.Fatalf("Control let a loopback dial through: %v", err)
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("%d connections", n)
	}
	if err := (&Policy{}).Control("tcp", "8.8.8.8:53", nil); err != nil {
		t.Fatalf("public address refused: %v", err)
	}
}

// TestHTTPClientRefusesInternalTargets: the redirect checker's client sends
// nothing to a name resolving to loopback nor to a loopback literal, and
// answers at once instead of waiting for the server's silence; with the
// allowance the same server is reached (and its silence is waited for).
func TestHTTPClientRefusesInternalTargets(t *testing.T) {
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	srv := startCounting(t)
	dns := startDNS(t, map[string][4]byte{"loop.example.": {127, 0, 0, 1}})
	cfg := Config{DNSServer: dns.addr(), Timeout: 700 * time.Millisecond}
	client := cfg.HTTPClient()
	for _, u := range []string{"http://loop.example:" + srv.port + "/", "http://127.0.0.2:" + srv.port + "/latest/meta-data/",
		"http://[::ffff:127.0.0.1]:" + srv.port + "/", "http://localhost:" + srv.port + "/"} {
		start := time.Now()
		resp, err := client.Head(u)
		if err == nil {
			resp.Body.Close()
			t.Errorf("HEAD %s: %d", u, resp.StatusCode)
			continue
		}
		if !errors.Is(err, ErrRefused) {
			t.Errorf("HEAD %s: %v, want a refusal", u, err)
		}
		if el := time.Since(start); el > 300*time.Millisecond {
			t.Errorf("HEAD %s: refused after %v, want at once", u, el)
		}
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the loopback server", n)
	}
	cfg.Allow = LoopbackPrefixes
	start := time.Now()
	if _, err := cfg.HTTPClient().Head("http://loop.example:" + srv.port + "/"); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("allowed: %v, want the response header timeout", err)
	}
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("allowed request ended after %v, before the server's silence timed out", el)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections with the allowance, want 1", n)
	}
}

// TestHTTPClientProxyRefusesInternalLiterals: through a proxy, a target
// that is an internal address literal is not sent to the proxy; names are
// (the proxy resolves them), and the proxy itself, on loopback, is reached
// without any allowance.
func TestHTTPClientProxyRefusesInternalLiterals(t *testing.T) {
	var hits atomic.Int64
	proxy := proxyServer(t, &hits)
	client := Config{HTTPProxy: proxy.URL, Timeout: 2 * time.Second}.HTTPClient()
	for _, u := range []string{"http://127.0.0.2/latest/meta-data/", "http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/",
		"http://2130706433/", "http://0x7f.1/"} {
		if _, err := client.Get(u); !errors.Is(err, ErrRefused) {
			t.Errorf("GET %s through the proxy: %v, want a refusal", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the proxy got %d requests for refused targets", hits.Load())
	}
	resp, err := client.Get("http://acme.example/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "proxied GET") || hits.Load() != 1 {
		t.Fatalf("named target through the proxy: %q (%d hits)", body, hits.Load())
	}
	tr := client.Transport.(*Transport)
	if u, err := tr.ProxyFor(&url.URL{Scheme: "http", Host: "acme.example"}); err != nil || u == nil {
		t.Fatalf("ProxyFor: %v, %v", u, err)
	}
}
