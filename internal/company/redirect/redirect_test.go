package redirect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/outbound"
)

// web is a forward proxy on loopback that simulates the websites below. The
// Checker reaches it through outbound.Config.HTTPProxy, so requests arrive in
// absolute form (GET http://host/path) and CONNECT for https.
type web struct {
	srv  *httptest.Server
	stop chan struct{} // closed at cleanup to release hanging handlers
	gate chan struct{} // slow.example waits on it

	mu   sync.Mutex
	hits map[string]int // by host (CONNECT: host:port)

	tls *httptest.Server // the https sites (*.example.com), after withTLS
}

// withTLS adds https sites under *.example.com (the names httptest's
// certificate holds), reached by CONNECT through the proxy like real ones,
// and makes c trust their certificate.
func (w *web) withTLS(t testing.TB, c *Checker) {
	t.Helper()
	w.tls = httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.hits["https://"+r.Host]++
		w.mu.Unlock()
		switch r.Host {
		case "tls-move.example.com":
			redirectTo(rw, http.StatusMovedPermanently, "https://www.elsewhere.example/")
		default:
			_, _ = fmt.Fprint(rw, "secure home")
		}
	}))
	t.Cleanup(w.tls.Close)
	pool := x509.NewCertPool()
	pool.AddCert(w.tls.Certificate())
	c.client.Transport.(*outbound.Transport).Proxied.TLSClientConfig = &tls.Config{RootCAs: pool}
}

// tunnel answers a CONNECT by piping the connection to the TLS server.
func (w *web) tunnel(rw http.ResponseWriter, _ *http.Request) {
	up, err := net.Dial("tcp", w.tls.Listener.Addr().String())
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	rw.WriteHeader(http.StatusOK)
	conn, buf, err := rw.(http.Hijacker).Hijack()
	if err != nil {
		up.Close()
		return
	}
	go func() { _, _ = io.Copy(up, buf); up.Close() }()
	_, _ = io.Copy(conn, up)
	conn.Close()
}

func startWeb(t testing.TB) *web {
	t.Helper()
	w := &web{stop: make(chan struct{}), gate: make(chan struct{}), hits: map[string]int{}}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	t.Cleanup(func() { close(w.stop) }) // runs before srv.Close (LIFO)
	return w
}

func (w *web) count(host string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hits[host]
}

func (w *web) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.hits {
		n += v
	}
	return n
}

func (w *web) checker(opts Options) *Checker {
	return NewChecker(outbound.Config{HTTPProxy: w.srv.URL, Timeout: 2 * time.Second}, opts)
}

func redirectTo(rw http.ResponseWriter, status int, loc string) {
	rw.Header().Set("Location", loc)
	rw.WriteHeader(status)
}

func (w *web) serve(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	w.hits[r.Host]++
	w.mu.Unlock()

	if r.Method == http.MethodConnect {
		if w.tls != nil && strings.HasSuffix(r.Host, ".example.com:443") {
			w.tunnel(rw, r)
			return
		}
		// Other sites have no TLS: their https hops fail at CONNECT, which
		// is what the checker must cope with.
		http.Error(rw, "CONNECT refused", http.StatusBadGateway)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(rw, "not a proxy request", http.StatusBadRequest)
		return
	}
	switch r.Host {
	case "plain.example", "www.newhome.example", "final.example", "www.www-only.example",
		"other.example", "gethome.example", "slowdest.example", "192.0.2.1":
		rw.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprint(rw, strings.Repeat("<p>hello</p>", 10_000)) // 120 KB, never read whole
	case "moved.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://www.newhome.example/")
	case "chain.example":
		redirectTo(rw, http.StatusFound, "http://hop.example/")
	case "hop.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://final.example/x")
	case "www-only.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://www.www-only.example/")
	case "scheme.example":
		redirectTo(rw, http.StatusMovedPermanently, "https://scheme.example/")
	case "secure-move.example":
		redirectTo(rw, http.StatusMovedPermanently, "https://www.elsewhere.example/home")
	case "loop.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://www.loop.example/")
	case "www.loop.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://loop.example/")
	case "pingpong.example":
		redirectTo(rw, http.StatusFound, "http://ping.example/")
	case "ping.example":
		redirectTo(rw, http.StatusFound, "http://pong.example/")
	case "pong.example":
		redirectTo(rw, http.StatusFound, "http://ping.example/")
	case "long.example":
		// Same-site chain that never ends: /, /1, /2, …
		n := 0
		_, _ = fmt.Sscanf(r.URL.Path, "/%d", &n)
		redirectTo(rw, http.StatusFound, fmt.Sprintf("/%d", n+1))
	case "relative.example":
		if r.URL.Path == "/" {
			redirectTo(rw, http.StatusFound, "welcome?lang=en")
			return
		}
		redirectTo(rw, http.StatusMovedPermanently, "//other.example/landing")
	case "rel-same.example":
		if r.URL.Path == "/" {
			redirectTo(rw, http.StatusMovedPermanently, "/en/")
			return
		}
		_, _ = fmt.Fprint(rw, "bienvenue")
	case "ip-redirect.example":
		redirectTo(rw, http.StatusMovedPermanently, "http://192.0.2.1/")
	case "meta-redirect.example":
		redirectTo(rw, http.StatusFound, "http://127.0.0.2/latest/meta-data/")
	case "127.0.0.2", "169.254.169.254":
		redirectTo(rw, http.StatusFound, "http://www.elsewhere.example/")
	case "mailto.example":
		redirectTo(rw, http.StatusFound, "mailto:info@mailto.example")
	case "nohead.example":
		if r.Method == http.MethodHead {
			http.Error(rw, "no HEAD here", http.StatusMethodNotAllowed)
			return
		}
		rw.Header().Set("Location", "http://gethome.example/")
		rw.WriteHeader(http.StatusMovedPermanently)
		_, _ = fmt.Fprint(rw, strings.Repeat("x", 1<<20)) // 1 MiB body, never read whole
	case "hang.example":
		select {
		case <-r.Context().Done():
		case <-w.stop:
		}
	case "slow.example":
		select {
		case <-w.gate:
		case <-w.stop:
			return
		}
		redirectTo(rw, http.StatusMovedPermanently, "http://slowdest.example/")
	case "tls-only.example.com":
		// Port 80 closed: a proxy answers 502 for it.
		http.Error(rw, "connection refused", http.StatusBadGateway)
	case "dead.example", "tls-move.example.com":
		// Accept the connection, then drop it without any HTTP response.
		if hj, ok := rw.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
	case "to-dead.example":
		redirectTo(rw, http.StatusFound, "http://www.dead.example/")
	case "www.dead.example":
		if hj, ok := rw.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
	default:
		if strings.HasSuffix(r.Host, "-away.example") {
			// a0-away.example → a1-away.example → … without end.
			n := 0
			_, _ = fmt.Sscanf(r.Host, "a%d-away.example", &n)
			redirectTo(rw, http.StatusFound, fmt.Sprintf("http://a%d-away.example/", n+1))
			return
		}
		http.Error(rw, "unknown host "+r.Host, http.StatusBadGateway)
	}
}

func TestCheck(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{MaxHops: 5})
	tests := []struct {
		domain string
		want   Result
		hits   map[string]int // upstream requests expected per host
	}{
		{"plain.example", Result{}, map[string]int{"plain.example": 1}},
		{"moved.example", Result{true, "newhome.example"}, map[string]int{"moved.example": 1, "www.newhome.example": 1}},
		{"chain.example", Result{true, "final.example"}, map[string]int{"chain.example": 1, "hop.example": 1, "final.example": 1}},
		{"www-only.example", Result{}, map[string]int{"www-only.example": 1, "www.www-only.example": 1}},
		// https hop cannot be fetched (CONNECT refused): the Location decides.
		{"scheme.example", Result{}, map[string]int{"scheme.example": 1, "scheme.example:443": 1}},
		{"secure-move.example", Result{true, "elsewhere.example"}, map[string]int{"www.elsewhere.example:443": 1}},
		// Same-site loop: not a redirect, stopped as soon as a URL repeats.
		{"loop.example", Result{}, map[string]int{"loop.example": 1, "www.loop.example": 1}},
		// Loop that never comes back: the host where the loop starts.
		{"pingpong.example", Result{true, "ping.example"}, map[string]int{"ping.example": 1, "pong.example": 1}},
		// Endless same-site chain: MaxHops redirects followed (6 fetches).
		{"long.example", Result{}, map[string]int{"long.example": 6}},
		// Endless cross-site chain: last Location seen after MaxHops.
		{"a0-away.example", Result{true, "a6-away.example"}, map[string]int{"a5-away.example": 1, "a6-away.example": 0}},
		{"relative.example", Result{true, "other.example"}, map[string]int{"relative.example": 2, "other.example": 1}},
		{"rel-same.example", Result{}, map[string]int{"rel-same.example": 2}},
		{"nohead.example", Result{true, "gethome.example"}, map[string]int{"nohead.example": 2, "gethome.example": 1}},
		// A hop to an address literal is not taken (the outbound policy:
		// it names no website, and it is how a hostile site would point the
		// checker inside), not even through the proxy.
		{"ip-redirect.example", Result{}, map[string]int{"ip-redirect.example": 1, "192.0.2.1": 0}},
		{"meta-redirect.example", Result{}, map[string]int{"meta-redirect.example": 1, "127.0.0.2": 0, "169.254.169.254": 0}},
		{"mailto.example", Result{}, map[string]int{"mailto.example": 1}},
		// A hop after the first that gives no HTTP answer: its host decides.
		// (Request counts to dropped connections are not pinned: the
		// transport may retry an idempotent request on a fresh connection.)
		{"to-dead.example", Result{true, "dead.example"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			got, err := c.Check(context.Background(), tt.domain)
			if err != nil {
				t.Fatalf("Check(%q): %v", tt.domain, err)
			}
			if got != tt.want {
				t.Fatalf("Check(%q) = %+v, want %+v", tt.domain, got, tt.want)
			}
			for host, n := range tt.hits {
				if got := w.count(host); got != n {
					t.Errorf("requests to %s = %d, want %d", host, got, n)
				}
			}
		})
	}
}

func TestCheckInputForms(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{})
	for _, in := range []string{"https://www.moved.example/path", "MOVED.EXAMPLE.", "moved.example"} {
		got, err := c.Check(context.Background(), in)
		if err != nil || got != (Result{true, "newhome.example"}) {
			t.Fatalf("Check(%q) = %+v, %v", in, got, err)
		}
	}
	if n := w.count("moved.example"); n != 1 {
		t.Fatalf("spellings of one domain made %d requests, want 1 (shared cache entry)", n)
	}

	_, err := c.Check(context.Background(), "not a domain")
	var inv *normalize.Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("invalid domain: err = %v, want *normalize.Invalid", err)
	}
}

func TestCheckNoAnswerIsError(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{})
	if _, err := c.Check(context.Background(), "dead.example"); err == nil || !errors.Is(err, errNoResponse) {
		t.Fatalf("dead site: err = %v, want errNoResponse", err)
	}
	// Errors are not cached: the next check asks again.
	before := w.count("dead.example")
	if _, err := c.Check(context.Background(), "dead.example"); err == nil {
		t.Fatal("second check of a dead site succeeded")
	}
	if w.count("dead.example") == before {
		t.Fatal("error result was cached: second check made no request")
	}
}

// A site whose port 80 is closed (the proxy's 502, or a dropped connection)
// is checked over https instead of being reported as not redirecting.
func TestCheckHTTPSOnlySite(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{})
	w.withTLS(t, c)
	for _, tt := range []struct {
		domain string
		want   Result
	}{
		{"tls-only.example.com", Result{}},
		{"tls-move.example.com", Result{true, "elsewhere.example"}},
	} {
		got, err := c.Check(context.Background(), tt.domain)
		if err != nil || got != tt.want {
			t.Fatalf("Check(%q) = %+v, %v; want %+v", tt.domain, got, err, tt.want)
		}
		if n := w.count("https://" + tt.domain); n != 1 {
			t.Errorf("https requests to %s = %d, want 1", tt.domain, n)
		}
	}
	// Neither scheme answers: still an error, and both were tried.
	if _, err := c.Check(context.Background(), "dead.example"); !errors.Is(err, errNoResponse) {
		t.Fatalf("dead site: err = %v, want errNoResponse", err)
	}
	if n := w.count("dead.example:443"); n != 1 {
		t.Fatalf("CONNECT dead.example:443 = %d, want 1 (https tried after http)", n)
	}
}

func TestCheckHangingSiteTimesOut(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Check(context.Background(), "hang.example")
	el := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if el < 250*time.Millisecond || el > 2*time.Second {
		t.Fatalf("check took %v, want about Options.Timeout (300ms)", el)
	}
}

func TestCheckCallerContext(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Check(ctx, "hang.example")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("err = %v after %v, want the caller's deadline", err, time.Since(start))
	}

	// A caller that has already gone starts no upstream work.
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	if _, err := c.Check(gone, "plain.example"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
	if n := w.count("plain.example"); n != 0 {
		t.Fatalf("cancelled ctx made %d upstream requests", n)
	}
}

func TestCheckCache(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{})
	for _, d := range []string{"plain.example", "moved.example"} {
		first, err := c.Check(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		before := w.total()
		second, err := c.Check(context.Background(), d)
		if err != nil || second != first {
			t.Fatalf("second Check(%q) = %+v, %v; want %+v", d, second, err, first)
		}
		if after := w.total(); after != before {
			t.Fatalf("second Check(%q) made %d upstream requests, want 0", d, after-before)
		}
	}
	if c.cache.len() != 2 {
		t.Fatalf("cache holds %d entries, want 2", c.cache.len())
	}

	// Disabled cache: every check goes upstream.
	nc := w.checker(Options{CacheSize: -1})
	before := w.count("plain.example")
	for range 3 {
		if _, err := nc.Check(context.Background(), "plain.example"); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.count("plain.example") - before; got != 3 {
		t.Fatalf("uncached checks made %d requests, want 3", got)
	}
}

func TestCacheLRUAndTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCache(2, time.Minute, func() time.Time { return now })
	c.put("a", Result{true, "x.example"})
	c.put("b", Result{})
	if _, ok := c.get("a"); !ok { // a becomes most recently used
		t.Fatal("a missing")
	}
	c.put("c", Result{})
	if _, ok := c.get("b"); ok {
		t.Fatal("b should have been evicted (least recently used)")
	}
	if r, ok := c.get("a"); !ok || r != (Result{true, "x.example"}) {
		t.Fatalf("a = %+v, %v", r, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := c.get("a"); ok {
		t.Fatal("a should have expired")
	}
	if c.len() != 1 {
		t.Fatalf("len = %d, want 1 (expired entry removed)", c.len())
	}
	var disabled *cache
	disabled.put("a", Result{})
	if _, ok := disabled.get("a"); ok || disabled.len() != 0 {
		t.Fatal("nil cache must be empty")
	}
}

// TestCheckCoalescing runs 50 concurrent checks of one domain with the cache
// disabled, so only singleflight can keep it to one upstream request.
func TestCheckCoalescing(t *testing.T) {
	w := startWeb(t)
	c := w.checker(Options{CacheSize: -1})
	const n = 50
	var started, done sync.WaitGroup
	results := make([]Result, n)
	errs := make([]error, n)
	started.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			started.Done()
			results[i], errs[i] = c.Check(context.Background(), "slow.example")
		}()
	}
	started.Wait()
	// Hold the one upstream request until every caller has had time to
	// join the flight.
	deadline := time.Now().Add(5 * time.Second)
	for w.count("slow.example") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(w.gate)
	done.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != (Result{true, "slowdest.example"}) {
			t.Fatalf("check %d = %+v, %v", i, results[i], errs[i])
		}
	}
	if got := w.count("slow.example"); got != 1 {
		t.Fatalf("%d concurrent checks made %d upstream requests, want 1", n, got)
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.MaxHops != 5 || o.CacheSize != 100_000 || o.CacheTTL != 24*time.Hour || o.Timeout != 10*time.Second {
		t.Fatalf("defaults = %+v", o)
	}
	if c := NewChecker(outbound.Config{}, Options{CacheSize: -1}); c.cache != nil {
		t.Fatal("negative CacheSize must disable the cache")
	}
}

func BenchmarkCheck(b *testing.B) {
	w := startWeb(b)
	b.Run("uncached-2-hops", func(b *testing.B) {
		c := w.checker(Options{CacheSize: -1})
		for b.Loop() {
			if _, err := c.Check(context.Background(), "moved.example"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := w.checker(Options{})
		if _, err := c.Check(context.Background(), "moved.example"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Check(context.Background(), "moved.example"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
