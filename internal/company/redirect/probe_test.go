package redirect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/bulkd/bulkd/internal/company/redirect/redirecttest"
	"github.com/bulkd/bulkd/internal/outbound"
)

// The direct world: no proxy, so the checker resolves every name itself
// through a real DNS server on loopback (redirecttest) and connects to the
// addresses it gets. The websites listen on loopback ports; the checker's
// dialer is wrapped to replace port 80 and 443 by theirs after its own
// resolution, so every lookup still goes through the real resolver path.
type directWorld struct {
	dns       *redirecttest.DNS
	httpPort  string // plain websites, on 127.0.0.1 and (when available) ::1
	tlsPort   string // https websites (names under example.com), 127.0.0.1
	closed    string // a port where nothing listens
	tlsCert   *x509.Certificate
	hasIPv6   bool
	mu        sync.Mutex
	hits      map[string]int // "http://host" or "https://host"
	conns     map[string]int // connections accepted, by local address ("127.0.0.2")
	httpsOnly map[string]bool
	sites     int // site-N requests being answered
	mostSites int // the most at once
}

// directZone is the DNS of the direct world.
func directZone(name string) redirecttest.Answer {
	local := redirecttest.Answer{A: []string{"127.0.0.1"}}
	switch name {
	case "dead.example", "dead2.example", "inhosts.example":
		return redirecttest.NXDomain
	case "moved.example", "www.newhome.example", "plain.example", "www.elsewhere.example", "tlsonly.example.com",
		"meta-hop.example", "numeric-hop.example", "hang-site.example":
		return local
	case "metadata.example":
		return redirecttest.Answer{A: []string{"169.254.169.254"}}
	case "mixed.example":
		return redirecttest.Answer{A: []string{"93.184.216.34", "127.0.0.1"}}
	case "v6only.example":
		return redirecttest.Answer{AAAA: []string{"::1"}}
	case "servfail.example":
		return redirecttest.Answer{Rcode: dns.RcodeServerFailure}
	case "nodata.example":
		return redirecttest.Answer{} // exists, no address
	case "silent.example":
		return redirecttest.Answer{Silent: true}
	}
	if strings.HasPrefix(name, "site-") {
		return local
	}
	return redirecttest.NXDomain // gone-N.example and everything else
}

func startDirect(t testing.TB) *directWorld {
	t.Helper()
	w := &directWorld{dns: redirecttest.StartDNS(t, directZone), hits: map[string]int{}, conns: map[string]int{},
		httpsOnly: map[string]bool{"tlsonly.example.com": true}}
	site := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		w.mu.Lock()
		w.hits[scheme+"://"+r.Host]++
		w.mu.Unlock()
		if strings.HasPrefix(r.Host, "site-") {
			w.mu.Lock()
			w.sites++
			w.mostSites = max(w.mostSites, w.sites)
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			w.mu.Lock()
			w.sites--
			w.mu.Unlock()
		}
		switch r.Host {
		case "moved.example":
			redirectTo(rw, http.StatusMovedPermanently, "http://www.newhome.example/")
		case "v6only.example", "tlsonly.example.com":
			redirectTo(rw, http.StatusMovedPermanently, scheme+"://www.elsewhere.example/")
		case "meta-hop.example":
			// A public-looking site sending the checker to a metadata
			// service on another address.
			redirectTo(rw, http.StatusFound, "http://127.0.0.2/latest/meta-data/")
		case "numeric-hop.example":
			redirectTo(rw, http.StatusFound, "http://2130706434/latest/meta-data/") // 127.0.0.2 as one number
		case "hang-site.example":
			<-r.Context().Done()
		default:
			_, _ = fmt.Fprint(rw, "home")
		}
	})
	// Plain websites: one port on 127.0.0.1 and ::1, and 127.0.0.2 (an
	// internal service a redirect may point at).
	for try := 0; ; try++ {
		l4, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l4.Addr().String())
		l2, err := net.Listen("tcp", "127.0.0.2:"+port)
		if err != nil {
			l4.Close()
			if try < 20 {
				continue // port taken on 127.0.0.2: try another
			}
			t.Fatal(err)
		}
		l6, err := net.Listen("tcp", "[::1]:"+port)
		if err != nil && try < 20 && !strings.Contains(err.Error(), "assign") {
			l4.Close() // port taken on ::1: try another
			l2.Close()
			continue
		}
		srv := &http.Server{Handler: site, ReadHeaderTimeout: 5 * time.Second, ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				host, _, _ := net.SplitHostPort(c.LocalAddr().String())
				w.mu.Lock()
				w.conns[host]++
				w.mu.Unlock()
			}
		}}
		go func() { _ = srv.Serve(l4) }()
		go func() { _ = srv.Serve(l2) }()
		if err == nil {
			w.hasIPv6 = true
			go func() { _ = srv.Serve(l6) }()
		}
		t.Cleanup(func() { _ = srv.Close() })
		w.httpPort = port
		break
	}
	ts := httptest.NewTLSServer(site)
	t.Cleanup(ts.Close)
	w.tlsCert = ts.Certificate()
	_, w.tlsPort, _ = net.SplitHostPort(ts.Listener.Addr().String())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, w.closed, _ = net.SplitHostPort(l.Addr().String())
	l.Close()
	return w
}

func (w *directWorld) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hits[key]
}

// connsTo returns the connections w's websites accepted on local address
// ip ("" for all of them).
func (w *directWorld) connsTo(ip string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ip != "" {
		return w.conns[ip]
	}
	n := 0
	for _, c := range w.conns {
		n += c
	}
	return n
}

// checker returns a Checker that goes direct, asks w's DNS server and
// reaches w's websites. The websites are on loopback: the test opens it, as
// an operator's --outbound-allow-cidrs would.
func (w *directWorld) checker(t testing.TB, opts Options) *Checker {
	t.Helper()
	return w.checkerAllowing(t, outbound.LoopbackPrefixes, opts)
}

// checkerAllowing is checker with the outbound allowance allow (nil: the
// default, public addresses only).
func (w *directWorld) checkerAllowing(t testing.TB, allow []netip.Prefix, opts Options) *Checker {
	t.Helper()
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	c := NewChecker(outbound.Config{DNSServer: w.dns.Addr, Timeout: 2 * time.Second, Allow: allow}, opts)
	tr := c.client.Transport.(*outbound.Transport).Direct
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		switch {
		case port == "443":
			port = w.tlsPort
		case port == "80" && w.httpsOnly[host]:
			port = w.closed // port 80 closed: connection refused
		case port == "80":
			port = w.httpPort
		}
		return dial(ctx, network, net.JoinHostPort(host, port))
	}
	pool := x509.NewCertPool()
	pool.AddCert(w.tlsCert)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	return c
}

// TestDirectAnswers pins the answer of every kind of domain when the checker
// resolves names itself. The answers are the ones the checker gave before
// the DNS probe existed: the probe may only make them cheaper.
func TestDirectAnswers(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{Timeout: 3 * time.Second})
	tests := []struct {
		domain  string
		want    Result
		wantErr bool // no answer: the row says "not redirecting"
		noSuch  bool // the error is ErrNoSuchDomain
	}{
		{domain: "dead.example", wantErr: true, noSuch: true},
		{domain: "moved.example", want: Result{true, "newhome.example"}},
		{domain: "plain.example"},
		// A site with only an IPv6 address is followed.
		{domain: "v6only.example", want: Result{true, "elsewhere.example"}},
		// http refused, https answers: followed over https.
		{domain: "tlsonly.example.com", want: Result{true, "elsewhere.example"}},
		// The resolver failed: an error, but not "no such domain".
		{domain: "servfail.example", wantErr: true},
		// The name exists without any address.
		{domain: "nodata.example", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			if tt.domain == "v6only.example" && !w.hasIPv6 {
				t.Skip("no IPv6 loopback")
			}
			got, err := c.Check(context.Background(), tt.domain)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Check(%q) = %+v, %v; want %+v, error %v", tt.domain, got, err, tt.want, tt.wantErr)
			}
			if errors.Is(err, ErrNoSuchDomain) != tt.noSuch {
				t.Fatalf("Check(%q): error %v; ErrNoSuchDomain: want %v", tt.domain, err, tt.noSuch)
			}
		})
	}
	if n := w.count("https://tlsonly.example.com"); n != 1 {
		t.Errorf("https requests to tlsonly.example.com = %d, want 1", n)
	}
}

// TestDeadDomainOneQuestion: one NXDOMAIN decides a dead domain, and is
// remembered for the zone's negative TTL. Before the probe, a dead domain
// cost four questions (A and AAAA for http, again for the https fallback)
// on every check.
func TestDeadDomainOneQuestion(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{})
	now := time.Unix(1_000_000, 0)
	c.dead.now = func() time.Time { return now }

	if _, err := c.Check(context.Background(), "dead.example"); !errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("err = %v, want ErrNoSuchDomain", err)
	}
	if a, aaaa := w.dns.Questions("dead.example", dns.TypeA), w.dns.Questions("dead.example", dns.TypeAAAA); a != 1 || aaaa != 0 {
		t.Fatalf("questions about dead.example: %d A, %d AAAA; want 1 A and nothing else", a, aaaa)
	}
	if n := w.dns.Total(); n != 1 {
		t.Fatalf("%d questions in all, want 1", n)
	}

	// Within the negative TTL (the SOA's MINIMUM, 60 s, under the 5 min
	// cap): no question at all.
	now = now.Add(redirecttest.SOAMinimum*time.Second - time.Second)
	if _, err := c.Check(context.Background(), "www.DEAD.example"); !errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("cached: err = %v, want ErrNoSuchDomain", err)
	}
	if n := w.dns.Total(); n != 1 {
		t.Fatalf("cached dead domain asked DNS again (%d questions)", n)
	}
	// After it: asked again.
	now = now.Add(2 * time.Second)
	if _, err := c.Check(context.Background(), "dead.example"); !errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("expired: err = %v, want ErrNoSuchDomain", err)
	}
	if n := w.dns.Questions("dead.example", dns.TypeA); n != 2 {
		t.Fatalf("after the negative TTL: %d A questions, want 2", n)
	}

	// The cap applies when the zone's TTL is longer.
	cc := w.checker(t, Options{NegativeTTL: 10 * time.Second})
	cc.dead.now = func() time.Time { return now }
	if _, err := cc.Check(context.Background(), "dead2.example"); !errors.Is(err, ErrNoSuchDomain) {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Second)
	if _, err := cc.Check(context.Background(), "dead2.example"); !errors.Is(err, ErrNoSuchDomain) {
		t.Fatal(err)
	}
	if n := w.dns.Questions("dead2.example", dns.TypeA); n != 2 {
		t.Fatalf("NegativeTTL 10s: %d A questions after 11 s, want 2", n)
	}
}

// TestNoHTTPSAfterNameNotFound: when the http request fails because the
// name has no address, https is not tried: it would look the same name up
// the same way. (Before, nodata.example cost A and AAAA twice.)
func TestNoHTTPSAfterNameNotFound(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{})
	if _, err := c.Check(context.Background(), "nodata.example"); err == nil || errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("err = %v, want a lookup error that is not ErrNoSuchDomain", err)
	}
	// The probe's A, then the http dial's A and AAAA; nothing for https.
	if a, aaaa := w.dns.Questions("nodata.example", dns.TypeA), w.dns.Questions("nodata.example", dns.TypeAAAA); a != 2 || aaaa != 1 {
		t.Fatalf("questions about nodata.example: %d A, %d AAAA; want 2 and 1", a, aaaa)
	}
	if c.dead.len() != 0 {
		t.Fatal("a name that exists was remembered as dead")
	}
}

// TestServfailIsNotDead: a resolver failure says nothing about the domain:
// not ErrNoSuchDomain, nothing remembered, asked again next time.
func TestServfailIsNotDead(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{})
	for round := 1; round <= 2; round++ {
		before := w.dns.Questions("servfail.example", dns.TypeA)
		_, err := c.Check(context.Background(), "servfail.example")
		if err == nil || errors.Is(err, ErrNoSuchDomain) {
			t.Fatalf("round %d: err = %v, want an error that is not ErrNoSuchDomain", round, err)
		}
		if w.dns.Questions("servfail.example", dns.TypeA) == before {
			t.Fatalf("round %d: no question asked: the failure was cached", round)
		}
	}
	if c.dead.len() != 0 || c.cache.len() != 0 {
		t.Fatalf("SERVFAIL was cached (dead %d, results %d)", c.dead.len(), c.cache.len())
	}
}

// TestSilentResolver: a resolver that never answers costs a bounded time
// and is not remembered.
func TestSilentResolver(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{Timeout: 1500 * time.Millisecond})
	start := time.Now()
	_, err := c.Check(context.Background(), "silent.example")
	el := time.Since(start)
	if err == nil || errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("err = %v, want a timeout that is not ErrNoSuchDomain", err)
	}
	// The probe (its waits of 1 s and 2 s, cut at Options.Timeout) counts
	// against Options.Timeout; the HTTP stage gets what is left, at least
	// 1 s.
	if el > 4*time.Second {
		t.Fatalf("check of a silent resolver took %v", el)
	}
	if c.dead.len() != 0 {
		t.Fatal("a timeout was remembered as dead")
	}
}

// TestProbeNeedsDirectConnections: through a proxy, the proxy resolves the
// names, with its own view of DNS; this process asks nothing.
func TestProbeNeedsDirectConnections(t *testing.T) {
	web := startWeb(t)
	d := redirecttest.StartDNS(t, directZone)
	c := NewChecker(outbound.Config{DNSServer: d.Addr, HTTPProxy: web.srv.URL, Timeout: 2 * time.Second}, Options{})
	got, err := c.Check(context.Background(), "moved.example") // the proxy's world has it
	if err != nil || got != (Result{true, "newhome.example"}) {
		t.Fatalf("through the proxy: %+v, %v", got, err)
	}
	if _, err := c.Check(context.Background(), "dead.example"); errors.Is(err, ErrNoSuchDomain) {
		t.Fatal("a local NXDOMAIN decided a domain the proxy resolves")
	}
	if n := d.Total(); n != 0 {
		t.Fatalf("%d DNS questions with a proxy, want 0", n)
	}
}

// TestProbeLeavesHostsFileNamesAlone: a name in the hosts file resolves
// from it whatever DNS says, so the probe does not decide it.
func TestProbeLeavesHostsFileNamesAlone(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("# comment\n127.0.0.1 localhost\n127.0.0.1\tInHosts.example. other.example # the site\n::1 ip6-localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := hostNames(hosts)
	for _, n := range []string{"localhost", "inhosts.example", "other.example", "ip6-localhost"} {
		if !names[n] {
			t.Errorf("hostNames: %q missing from %v", n, names)
		}
	}
	if names["127.0.0.1"] || names["#"] || names["the"] {
		t.Errorf("hostNames: addresses or comments read as names: %v", names)
	}
	if hostNames(filepath.Join(t.TempDir(), "missing")) != nil {
		t.Error("a missing hosts file lists names")
	}

	old := hostsFile
	hostsFile = hosts
	t.Cleanup(func() { hostsFile = old })
	w := startDirect(t)
	c := w.checker(t, Options{})
	if c.probe.probeable("inhosts.example") || !c.probe.probeable("dead.example") {
		t.Fatal("probeable ignores the hosts file")
	}
	for _, d := range []string{"foo.localhost", "printer.local"} {
		if c.probe.probeable(d) {
			t.Errorf("probeable(%q): special-use names are left to the resolver", d)
		}
	}
	if _, err := c.Check(context.Background(), "inhosts.example"); err == nil || errors.Is(err, ErrNoSuchDomain) {
		t.Fatalf("inhosts.example: err = %v; want the HTTP stage's own error", err)
	}
	if c.dead.len() != 0 {
		t.Fatal("a hosts-file name was remembered as dead")
	}
}

// TestCheckAllStages: a batch is answered per domain as Check answers it,
// the dead domains do not wait for the HTTP stage's bound, and the HTTP
// stage holds its bound.
func TestCheckAllStages(t *testing.T) {
	w := startDirect(t)
	c := w.checker(t, Options{})
	var doms []string
	for i := range 200 {
		doms = append(doms, fmt.Sprintf("gone-%d.example", i))
	}
	for i := range 10 {
		doms = append(doms, fmt.Sprintf("site-%d.example", i))
	}
	doms = append(doms, "moved.example", "plain.example", "servfail.example", "not a domain")
	// Every question waits until 64 are waiting at once: only a DNS stage
	// that runs far more than the HTTP stage's 2 at once gets there.
	reached := w.dns.GateAt(64, time.Second)
	rs, errs := c.CheckAll(context.Background(), doms, 2)
	if !reached() {
		_, most := w.dns.InFlight()
		t.Fatalf("at most %d DNS questions in flight; the probes wait for the HTTP stage's bound", most)
	}
	for i, d := range doms {
		switch {
		case strings.HasPrefix(d, "gone-"):
			if !errors.Is(errs[i], ErrNoSuchDomain) || rs[i] != (Result{}) {
				t.Fatalf("%s: %+v, %v", d, rs[i], errs[i])
			}
		case d == "moved.example":
			if errs[i] != nil || rs[i] != (Result{true, "newhome.example"}) {
				t.Fatalf("%s: %+v, %v", d, rs[i], errs[i])
			}
		case d == "plain.example", strings.HasPrefix(d, "site-"):
			if errs[i] != nil || rs[i] != (Result{}) {
				t.Fatalf("%s: %+v, %v", d, rs[i], errs[i])
			}
		default:
			if errs[i] == nil || errors.Is(errs[i], ErrNoSuchDomain) {
				t.Fatalf("%s: err = %v", d, errs[i])
			}
		}
	}
	if n := w.dns.Questions("gone-7.example", dns.TypeA) + w.dns.Questions("gone-7.example", dns.TypeAAAA); n != 1 {
		t.Fatalf("gone-7.example: %d questions, want 1", n)
	}
	w.mu.Lock()
	most := w.mostSites
	w.mu.Unlock()
	if most > 2 {
		t.Fatalf("%d website requests at once, want at most the HTTP stage's 2", most)
	}
}

// BenchmarkCheckAllDead: batches of 500 domains that do not exist, cold
// caches, against the loopback DNS server (whose work is included).
func BenchmarkCheckAllDead(b *testing.B) {
	w := startDirect(b)
	c := w.checker(b, Options{CacheSize: -1})
	doms := make([]string, 500)
	n := 0
	for b.Loop() {
		for i := range doms {
			doms[i] = fmt.Sprintf("gone-%d.example", n)
			n++
		}
		_, errs := c.CheckAll(context.Background(), doms, 32)
		for _, err := range errs {
			if !errors.Is(err, ErrNoSuchDomain) {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/domain")
	b.ReportMetric(float64(w.dns.Total())/float64(n), "questions/domain")
}
