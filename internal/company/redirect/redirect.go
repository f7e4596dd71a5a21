// Package redirect answers, for a company row submitted by domain, whether
// the domain's website redirects to a website on another registrable domain
// (SPEC 2.4 is_redirect / redirected_to).
//
// A check requests http://<domain>/ (https://<domain>/ when port 80 gives no
// answer or a gateway error) and follows Location headers itself, hop by
// hop, so it sees where the chain ends even when the last hop cannot be
// fetched. Everything is bounded: hops (Options.MaxHops), bytes read from any
// body (maxBodyBytes), time (Options.Timeout for the whole check, plus the
// outbound per-call timeouts), and the result cache (Options.CacheSize).
package redirect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

	// maxBodyBytes is the most read from any response body. We only need
	// status and headers; draining a little lets the connection be reused,
	// anything bigger is cut off by closing the connection.
	maxBodyBytes = 4 << 10

	userAgent = "Mozilla/5.0 (compatible; bulkd-redirect-check/1.0)"
)

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
	return o
}

// Checker checks domains for redirects. It is safe for concurrent use;
// concurrent checks of one domain share a single upstream check.
type Checker struct {
	client *http.Client
	opts   Options
	cache  *cache // nil when disabled
	group  singleflight.Group
}

// NewChecker returns a Checker whose requests go through cfg's HTTP client
// (proxy, resolver, per-call timeouts; redirects are not auto-followed).
func NewChecker(cfg outbound.Config, opts Options) *Checker {
	opts = opts.withDefaults()
	c := &Checker{client: cfg.HTTPClient(), opts: opts}
	if opts.CacheSize > 0 {
		c.cache = newCache(opts.CacheSize, opts.CacheTTL, time.Now)
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
//     not a redirect.
//   - The first hop is http://<domain>/, or https://<domain>/ when http
//     gets no HTTP answer or a gateway error (502/504).
//   - If neither first request gets an HTTP answer, Check returns an
//     error and the caller decides. Errors are not cached.
//
// If ctx ends first, Check returns ctx's error, but a check already started
// keeps running (bounded by Options.Timeout) for other callers and the cache.
func (c *Checker) Check(ctx context.Context, domain string) (Result, error) {
	d, err := normalize.CanonicalDomain(domain)
	if err != nil {
		return Result{}, fmt.Errorf("redirect check %q: %w", domain, err)
	}
	if r, ok := c.cache.get(d); ok {
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		// Do not start upstream work for a caller that has already gone.
		return Result{}, fmt.Errorf("redirect check %s: %w", d, err)
	}
	ch := c.group.DoChan(d, func() (any, error) {
		// A flight that finished between our cache miss and joining may
		// have just stored the answer.
		if r, ok := c.cache.get(d); ok {
			return r, nil
		}
		// Detached from the first caller's cancellation: the result is
		// shared with every caller waiting on this domain and cached.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.Timeout)
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
