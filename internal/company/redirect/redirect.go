// Package redirect answers, for a company row submitted by domain, whether
// the domain's website redirects to a website on another registrable domain
// (SPEC 2.4 is_redirect / redirected_to).
//
// A check requests http://<domain>/ (https://<domain>/ when port 80 gives no
// answer or a gateway error) and follows Location headers itself, hop by
// hop, so it sees where the chain ends even when the last hop cannot be
// fetched. Everything is bounded: hops (Options.MaxHops), bytes read from any
// body (maxBodyBytes), time (Options.Timeout for the whole check, plus the
// outbound per-call timeouts), and the caches (Options.CacheSize).
//
// Connections go through the outbound policy (internal/outbound): public
// addresses only unless the operator allowed more, every address of a name
// checked, no hop to an IP literal. Through a proxy, the proxy resolves the
// names and must refuse internal destinations itself.
//
// When the website would be reached directly (no proxy), one DNS question
// comes first (probe.go): a domain that does not exist (NXDOMAIN) is decided
// by it, without any HTTP request, and remembered for its negative TTL.
// CheckAll runs those cheap questions for a whole batch with a high
// concurrency and sends only the remaining domains to the HTTP stage, under
// its own bound.
package redirect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/outbound"
)

const (
	// DefaultMaxHops is the default number of redirects followed.
	DefaultMaxHops = 5
	// DefaultCacheSize is the default number of domains kept in the cache.
	DefaultCacheSize = 100_000
	// DefaultCacheTTL is how long a result is reused. Company websites change
	// their redirects rarely; a day keeps repeated jobs cheap.
	DefaultCacheTTL = 24 * time.Hour
	// DefaultTimeout bounds one whole check, all hops included.
	DefaultTimeout = 10 * time.Second
	// DefaultResolveConcurrency bounds the DNS questions a Checker has in
	// flight, all batches together. A question costs the resolver
	// microseconds to a few hundred milliseconds of waiting and us almost
	// nothing, so many run at once; the HTTP stage keeps its own, lower
	// bound per batch. The bound is per process rather than per batch so
	// that more workers do not mean a bigger burst at the resolver, whose
	// socket buffer drops what it cannot hold (a lost question costs a
	// one-second retry).
	DefaultResolveConcurrency = 256
	// DefaultNegativeTTL caps how long a domain that does not exist is
	// remembered (the zone's own negative TTL applies when shorter), so a
	// domain registered or fixed by its owner is seen within minutes. The
	// email verifier keeps negative DNS answers as long.
	DefaultNegativeTTL = 5 * time.Minute

	// maxBodyBytes is the most read from any response body. We only need
	// status and headers; draining a little lets the connection be reused,
	// anything bigger is cut off by closing the connection.
	maxBodyBytes = 4 << 10

	userAgent = "Mozilla/5.0 (compatible; bulkd-redirect-check/1.0)"
)

// ErrNoSuchDomain is the error of a check whose domain does not exist in DNS
// (NXDOMAIN): it has no website to follow.
var ErrNoSuchDomain = errors.New("no such domain")

// Result is the outcome of a check.
type Result struct {
	// IsRedirect is true when the website ends up on another registrable
	// domain.
	IsRedirect bool
	// RedirectedTo is the host the website ends up on, in canonical domain
	// form (no "www."), when IsRedirect is true; empty otherwise.
	RedirectedTo string
}

// Options tunes a Checker. Zero values mean the defaults.
type Options struct {
	// MaxHops is the most redirects followed (default 5).
	MaxHops int
	// CacheSize is the most domains cached (default 100,000); a negative
	// value disables the cache.
	CacheSize int
	// CacheTTL is how long a cached result is used (default 24h).
	CacheTTL time.Duration
	// Timeout bounds one whole check (default 10s).
	Timeout time.Duration
	// ResolveConcurrency bounds the DNS questions the Checker has in
	// flight (default 256).
	ResolveConcurrency int
	// NegativeTTL caps how long a domain found not to exist is
	// remembered (default 5m). Those domains are kept apart from the
	// results, in a cache of CacheSize entries of its own.
	NegativeTTL time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxHops <= 0 {
		o.MaxHops = DefaultMaxHops
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ResolveConcurrency <= 0 {
		o.ResolveConcurrency = DefaultResolveConcurrency
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = DefaultNegativeTTL
	}
	return o
}

// Checker checks domains for redirects. It is safe for concurrent use;
// concurrent checks of one domain share a single upstream check.
type Checker struct {
	client *http.Client
	opts   Options
	cache  *cache // results; nil when disabled
	dead   *cache // domains that do not exist; nil when disabled
	probe  *prober
	dnsSem chan struct{} // bounds the probes in flight, process-wide
	// noProxy: no request goes through a proxy (outbound.Config.NoProxy),
	// so direct need not ask the transport host by host.
	noProxy bool
	group   singleflight.Group // HTTP stage, by domain
}

// NewChecker returns a Checker whose requests go through cfg's HTTP client
// (proxy, resolver, per-call timeouts; redirects are not auto-followed) and
// whose existence probes ask cfg's DNS servers. Without a DNS server to ask
// (no --dns-server and no usable resolv.conf) every domain goes to the HTTP
// stage, as before the probe existed.
func NewChecker(cfg outbound.Config, opts Options) *Checker {
	cfg = cfg.WithDefaults()
	opts = opts.withDefaults()
	c := &Checker{client: cfg.HTTPClient(), opts: opts, dnsSem: make(chan struct{}, opts.ResolveConcurrency), noProxy: cfg.NoProxy()}
	if opts.CacheSize > 0 {
		c.cache = newCache(opts.CacheSize, opts.CacheTTL, time.Now)
		c.dead = newCache(opts.CacheSize, opts.NegativeTTL, time.Now)
	}
	if servers, err := cfg.DNSServers(); err == nil {
		c.probe = newProber(servers, cfg.Timeout, opts.ResolveConcurrency)
	}
	return c
}

// Check reports whether domain's website redirects to another registrable
// domain. domain may be written in any form normalize accepts ("www.", scheme,
// IDN, …); results are cached under its canonical form.
//
// The rules:
//   - A redirect within the same registrable domain (http→https,
//     acme.com→www.acme.com, →/en/, →shop.acme.com) is not a redirect.
//   - If a hop after the first cannot be fetched (TLS or CONNECT failure,
//     unreachable host, time running out), the last Location seen decides:
//     the site demonstrably sends visitors there.
//   - After MaxHops redirects the chain is not followed further and the last
//     Location seen decides.
//   - A redirect loop (a URL seen twice) stops at once. If the loop passes
//     through the input's registrable domain the site keeps visitors at home:
//     not a redirect. Otherwise the result is the host where the loop starts.
//   - A final host that is not a domain (an IP address) names no website:
//     not a redirect. A hop to an IP address is never taken (a hostile
//     site's way to point the checker inside, http://127.0.0.2/...): the
//     chain ends there, not a redirect.
//   - Every connection goes through the outbound policy (internal/outbound):
//     a name with any address that is not public (and not in the operator's
//     allowance) gets no connection. Refused on the first hop, the check
//     returns at once an error wrapping outbound.ErrRefused, not cached
//     (the row answers "no redirect", as for a site that cannot be
//     reached); refused on a later hop, it is a hop that cannot be fetched.
//   - The first hop is http://<domain>/, or https://<domain>/ when http
//     gets no HTTP answer or a gateway error (502/504), unless the name
//     does not resolve: https cannot reach a host http could not find.
//   - If neither first request gets an HTTP answer, Check returns an
//     error and the caller decides. Errors are not cached, except that a
//     domain that does not exist (NXDOMAIN, error ErrNoSuchDomain) is
//     remembered for its negative TTL (at most Options.NegativeTTL).
//
// If ctx ends first, Check returns ctx's error, but a check already started
// keeps running (bounded by Options.Timeout) for other callers and the cache.
func (c *Checker) Check(ctx context.Context, domain string) (Result, error) {
	rs, errs := c.CheckAll(ctx, []string{domain}, 1)
	return rs[0], errs[0]
}

// CheckAll checks a batch of domains as Check does, in two stages: the
// caches and the DNS existence probe for every domain (at most
// Options.ResolveConcurrency questions at once in the whole Checker, all
// batches together), then the HTTP stage for the domains still undecided,
// at most concurrency at once for this batch. A domain goes on to the HTTP
// stage as soon as its probe is answered. errs[i] is the error Check would
// return for domains[i].
func (c *Checker) CheckAll(ctx context.Context, domains []string, concurrency int) ([]Result, []error) {
	res := make([]Result, len(domains))
	errs := make([]error, len(domains))
	canon := make([]string, len(domains))
	var probe, fetch []int // indexes of the domains for each stage
	for i, domain := range domains {
		d, err := normalize.CanonicalDomain(domain)
		if err != nil {
			errs[i] = fmt.Errorf("redirect check %q: %w", domain, err)
			continue
		}
		canon[i] = d
		if r, ok := c.cache.get(d); ok {
			res[i] = r
			continue
		}
		if _, ok := c.dead.get(d); ok {
			errs[i] = fmt.Errorf("redirect check %s: %w (cached)", d, ErrNoSuchDomain)
			continue
		}
		if err := ctx.Err(); err != nil {
			// Do not start upstream work for a caller that has already gone.
			errs[i] = fmt.Errorf("redirect check %s: %w", d, err)
			continue
		}
		if c.probe.probeable(d) && c.direct(d) {
			probe = append(probe, i)
		} else {
			fetch = append(fetch, i)
		}
	}
	if len(probe)+len(fetch) == 0 {
		return res, errs
	}

	// Each stage is a pool of workers, so a batch of 500 costs a few
	// hundred goroutines whose stacks have grown once, not one per domain.
	spent := make([]time.Duration, len(domains)) // the probe's share of Options.Timeout
	toFetch := make(chan int, len(probe)+len(fetch))
	for _, i := range fetch {
		toFetch <- i
	}
	var fetchers sync.WaitGroup
	for range min(max(concurrency, 1), len(probe)+len(fetch)) {
		fetchers.Go(func() {
			for i := range toFetch {
				if err := ctx.Err(); err != nil {
					errs[i] = fmt.Errorf("redirect check %s: %w", canon[i], err)
					continue
				}
				res[i], errs[i] = c.fetchChain(ctx, canon[i], c.opts.Timeout-spent[i])
			}
		})
	}
	toProbe := make(chan int, len(probe))
	for _, i := range probe {
		toProbe <- i
	}
	close(toProbe)
	var probers sync.WaitGroup
	for range min(c.opts.ResolveConcurrency, len(probe)) {
		probers.Go(func() {
			for i := range toProbe {
				c.dnsSem <- struct{}{}
				t0 := time.Now()
				err := c.resolve(ctx, canon[i])
				spent[i] = time.Since(t0)
				<-c.dnsSem
				if err != nil { // no such domain, or the caller has gone
					errs[i] = err
					continue
				}
				toFetch <- i
			}
		})
	}
	probers.Wait()
	close(toFetch)
	fetchers.Wait()
	return res, errs
}

// direct reports whether the HTTP stage would reach d's website without a
// proxy, both over http and https. Only then does this process's DNS
// decide where the website is: a proxy resolves names itself, with its own
// view of DNS.
func (c *Checker) direct(d string) bool {
	if c.noProxy {
		return true
	}
	tr, ok := c.client.Transport.(*outbound.Transport)
	if !ok {
		return false
	}
	for _, scheme := range []string{"http", "https"} {
		u, err := tr.ProxyFor(&url.URL{Scheme: scheme, Host: d, Path: "/"})
		if err != nil || u != nil {
			return false
		}
	}
	return true
}

// resolve probes d. When d does not exist it is remembered and the error
// wraps ErrNoSuchDomain; when ctx ends first the error is ctx's. Otherwise
// (the name exists, or the probe got no usable answer) it returns nil: the
// HTTP stage decides. Concurrent probes of one domain are not coalesced as
// the HTTP stage is: the domains of a batch are distinct, and a duplicate
// question costs less than coordinating it would.
func (c *Checker) resolve(ctx context.Context, d string) error {
	v, ttl, _ := c.probe.probe(ctx, d, time.Now().Add(c.opts.Timeout))
	if v == probeNXDomain {
		c.dead.putFor(d, Result{}, min(ttl, c.opts.NegativeTTL))
		return fmt.Errorf("redirect check %s: %w", d, ErrNoSuchDomain)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redirect check %s: %w", d, err)
	}
	return nil
}

// fetchChain runs the HTTP stage for canonical domain d, shared with
// concurrent callers for the same domain, within budget.
func (c *Checker) fetchChain(ctx context.Context, d string, budget time.Duration) (Result, error) {
	ch := c.group.DoChan(d, func() (any, error) {
		// A flight that finished between our cache miss and joining may
		// have just stored the answer.
		if r, ok := c.cache.get(d); ok {
			return r, nil
		}
		// Detached from the first caller's cancellation: the result is
		// shared with every caller waiting on this domain and cached.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, time.Second))
		defer cancel()
		r, err := c.check(fctx, d)
		if err != nil {
			return Result{}, err
		}
		c.cache.put(d, r)
		return r, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Result{}, res.Err
		}
		return res.Val.(Result), nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("redirect check %s: %w", d, ctx.Err())
	}
}

// check follows the redirect chain of canonical domain d.
func (c *Checker) check(ctx context.Context, d string) (Result, error) {
	home, err := normalize.RegistrableDomain(d)
	if err != nil {
		return Result{}, fmt.Errorf("redirect check %s: %w", d, err)
	}
	cur, loc, err := c.firstHop(ctx, d)
	if err != nil {
		return Result{}, fmt.Errorf("redirect check %s: %w", d, err)
	}
	chain := []*url.URL{cur}
	for hop := 0; ; hop++ {
		if hop > 0 {
			if loc, _, err = c.fetch(ctx, cur); err != nil {
				return judge(home, cur.Hostname()), nil
			}
		}
		if loc == nil {
			return judge(home, cur.Hostname()), nil
		}
		if isIPLiteral(loc) {
			// A hop to an address (http://127.0.0.2/latest/meta-data/)
			// is not taken: it names no website, and it is how a hostile
			// site would point bulkd at an internal address. The chain
			// ends there: not a redirect (judge).
			return judge(home, loc.Hostname()), nil
		}
		for i, u := range chain {
			if u.String() == loc.String() {
				return judgeLoop(home, chain[i:]), nil
			}
		}
		if hop+1 > c.opts.MaxHops {
			return judge(home, loc.Hostname()), nil
		}
		cur = loc
		chain = append(chain, cur)
	}
}

// firstHop fetches the first hop of domain d's chain and returns the URL it
// fetched and the Location it answered. It asks http://d/ first (most sites
// answer there, if only to send visitors to https), then https://d/ when http
// gave no HTTP answer or a gateway error: port 80 closed shows up as a refused
// connection when going direct and as a 502/504 from a proxy, and a site served
// only over TLS must still be followed.
func (c *Checker) firstHop(ctx context.Context, d string) (*url.URL, *url.URL, error) {
	plain := &url.URL{Scheme: "http", Host: d, Path: "/"}
	loc, status, err := c.fetch(ctx, plain)
	if err == nil && status != http.StatusBadGateway && status != http.StatusGatewayTimeout {
		return plain, loc, nil
	}
	if ctx.Err() != nil {
		// The check's time is up; there is none left for a second try.
		return nil, nil, err
	}
	if errors.Is(err, outbound.ErrRefused) {
		// The name leads where bulkd may not go (the outbound policy):
		// https would resolve it the same way. No connection was made.
		return nil, nil, err
	}
	if notFound(err) && c.direct(d) {
		// The name does not resolve here, and https would resolve it the
		// same way: nothing to try.
		return nil, nil, err
	}
	secure := &url.URL{Scheme: "https", Host: d, Path: "/"}
	sloc, _, serr := c.fetch(ctx, secure)
	switch {
	case serr == nil:
		return secure, sloc, nil
	case err == nil:
		return plain, loc, nil // http's gateway error is the best answer there is
	default:
		return nil, nil, errors.Join(err, serr)
	}
}

// notFound reports whether err is the resolver finding no address for the
// host (NXDOMAIN, or no A nor AAAA record), as opposed to a lookup that
// failed (SERVFAIL, timeout) and might succeed on another try.
func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// isIPLiteral reports whether u's host is an address rather than a name
// (outbound.LooksLikeAddress: numeric forms a proxy might read as one too).
func isIPLiteral(u *url.URL) bool { return outbound.LooksLikeAddress(u.Hostname()) }

// judge compares the final host with the input's registrable domain.
func judge(home, host string) Result {
	fd, err := normalize.CanonicalDomain(host)
	if err != nil {
		return Result{} // IP literal or junk: no website to name
	}
	reg, err := normalize.RegistrableDomain(fd)
	if err != nil || reg == home {
		return Result{}
	}
	return Result{IsRedirect: true, RedirectedTo: fd}
}

// judgeLoop decides a redirect loop; cycle starts at the repeated URL.
func judgeLoop(home string, cycle []*url.URL) Result {
	// A loop redirects only if every URL in it is on another domain; it is
	// then named by the repeated URL.
	first := judge(home, cycle[0].Hostname())
	if !first.IsRedirect {
		return Result{}
	}
	for _, u := range cycle[1:] {
		if !judge(home, u.Hostname()).IsRedirect {
			return Result{}
		}
	}
	return first
}

// errNoResponse marks a hop that produced no HTTP response.
var errNoResponse = errors.New("no HTTP response")

// fetch requests u (HEAD, or GET when the server refuses HEAD) and returns
// the resolved Location of a redirect response (nil for any other response)
// and the response status.
func (c *Checker) fetch(ctx context.Context, u *url.URL) (*url.URL, int, error) {
	resp, err := c.do(ctx, http.MethodHead, u)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented {
		if resp, err = c.do(ctx, http.MethodGet, u); err != nil {
			return nil, 0, err
		}
	}
	return nextURL(resp, u), resp.StatusCode, nil
}

// do sends one request and returns the response with its body already
// drained (at most maxBodyBytes) and closed.
func (c *Checker) do(ctx context.Context, method string, u *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/html,*/*;q=0.8")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", method, u, errNoResponse, err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxBodyBytes)
	resp.Body.Close()
	return resp, nil
}

// nextURL returns where a redirect response points, resolved against the
// request URL, or nil if resp is not a followable redirect.
func nextURL(resp *http.Response, base *url.URL) *url.URL {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	ref, err := url.Parse(loc)
	if err != nil {
		return nil
	}
	next := base.ResolveReference(ref)
	if (next.Scheme != "http" && next.Scheme != "https") || next.Hostname() == "" {
		return nil // mailto:, javascript:, …: not a website
	}
	next.Fragment, next.RawFragment, next.User = "", "", nil
	return next
}
