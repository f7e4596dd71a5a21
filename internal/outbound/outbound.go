// Package outbound holds all configuration for network calls the service
// makes to the outside world (DNS, SMTP, HTTP), so that every outbound path —
// redirect checks, MX lookups, SMTP verification — uses the same resolver,
// proxy and timeouts, and tests can point all of them at loopback servers.
//
// It also holds the one outbound policy (policy.go): which addresses a
// connection made on a customer's behalf may reach (public ones, plus the
// operator's allowance), for the redirect checks (HTTPClient), the SMTP
// verifier and webhooks alike.
package outbound

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http/httpproxy"
)

const (
	// DefaultSMTPPort is the port SMTP verification connects to.
	DefaultSMTPPort = 25
	// DefaultTimeout bounds each network call (dial, TLS handshake, DNS
	// exchange, wait for response headers).
	DefaultTimeout = 5 * time.Second
	// defaultDNSPort is added to a DNSServer given without a port.
	defaultDNSPort = "53"
)

// Config is the outbound network configuration. The zero value means: system
// resolver, SMTP port 25, proxy from the environment, 5 s per call.
type Config struct {
	// DNSServer is "host:port" of the DNS server to query; a value without a
	// port gets :53. Empty means the system resolver configuration.
	DNSServer string
	// SMTPPort is the port used by the email verifier; 0 means 25.
	SMTPPort int
	// HTTPProxy is the proxy URL for all HTTP(S) traffic ("http://host:port";
	// a value without a scheme is read as http://). Empty means the
	// HTTP_PROXY/HTTPS_PROXY/NO_PROXY environment variables.
	HTTPProxy string
	// Timeout bounds each network call; 0 means 5 s.
	Timeout time.Duration
	// Allow are the ranges the operator allowed besides public addresses
	// (--outbound-allow-cidrs): the Policy of every connection made on a
	// customer's behalf.
	Allow []netip.Prefix
}

// Policy returns the outbound policy: public addresses and Allow.
func (c Config) Policy() *Policy { return &Policy{Allow: c.Allow} }

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.SMTPPort == 0 {
		c.SMTPPort = DefaultSMTPPort
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports configuration errors early (at startup) instead of on the
// first request. The constructors below never fail; with an invalid HTTPProxy
// the client fails every request rather than silently going direct.
func (c Config) Validate() error {
	if c.DNSServer != "" {
		host, port, err := net.SplitHostPort(c.dnsServer())
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("outbound: DNS server %q: want host:port", c.DNSServer)
		}
	}
	if c.SMTPPort < 0 || c.SMTPPort > 65535 {
		return fmt.Errorf("outbound: SMTP port %d out of range", c.SMTPPort)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("outbound: negative timeout %v", c.Timeout)
	}
	if c.HTTPProxy != "" {
		if _, err := c.proxyURL(); err != nil {
			return err
		}
	}
	return nil
}

// SMTPAddr returns host:port for an SMTP connection to host.
func (c Config) SMTPAddr(host string) string {
	return net.JoinHostPort(host, fmt.Sprint(c.WithDefaults().SMTPPort))
}

func (c Config) dnsServer() string {
	s := strings.TrimSpace(c.DNSServer)
	if _, _, err := net.SplitHostPort(s); err != nil {
		// No port (or a bare IPv6 address): use the DNS port.
		s = net.JoinHostPort(strings.Trim(s, "[]"), defaultDNSPort)
	}
	return s
}

// Resolver returns a pure-Go resolver. When DNSServer is set every query is
// sent there (over UDP, or TCP when the resolver falls back for a truncated
// answer), whatever /etc/resolv.conf says; otherwise the system
// configuration is used. The Go resolver is used in both cases so behaviour
// (timeouts, no cgo) does not depend on the host's libc.
func (c Config) Resolver() *net.Resolver {
	c = c.WithDefaults()
	r := &net.Resolver{PreferGo: true}
	if c.DNSServer == "" {
		return r
	}
	server := c.dnsServer()
	d := &net.Dialer{Timeout: c.Timeout}
	r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, server)
		if err != nil {
			return nil, fmt.Errorf("outbound: dial DNS server %s: %w", server, err)
		}
		return conn, nil
	}
	return r
}

// resolvConf is the system resolver configuration read by DNSServers.
var resolvConf = "/etc/resolv.conf"

// DNSServers returns the "host:port" addresses of the DNS servers Resolver
// asks: DNSServer when set, otherwise the nameservers of /etc/resolv.conf in
// their order. It is for callers that send their own DNS questions (the
// redirect checker's existence probe) and must ask the same servers as the
// dialer does.
func (c Config) DNSServers() ([]string, error) {
	if c.DNSServer != "" {
		return []string{c.dnsServer()}, nil
	}
	cc, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("outbound: no DNS server configured and %s unreadable: %w", resolvConf, err)
	}
	if len(cc.Servers) == 0 {
		return nil, fmt.Errorf("outbound: no DNS server configured and none in %s", resolvConf)
	}
	out := make([]string, len(cc.Servers))
	for i, s := range cc.Servers {
		out[i] = net.JoinHostPort(s, cc.Port)
	}
	return out, nil
}

// Dialer returns the dialer of connections made on a customer's behalf:
// names resolved with Resolver, every address checked against Policy, the
// checked address dialled, all within Timeout.
func (c Config) Dialer() *Dialer {
	c = c.WithDefaults()
	return &Dialer{Policy: c.Policy(), Resolver: c.Resolver(), Timeout: c.Timeout, KeepAlive: 30 * time.Second}
}

// HTTPClient returns a client that sends requests through the configured
// proxy, or directly through Dialer (the policy) when no proxy applies,
// bounds dial/TLS handshake/response header waits by Timeout and never
// follows redirects: the redirect checker follows them itself to see every
// hop (and to refuse hops it must not take), and no other caller wants to be
// taken to a host it did not ask for. Reading a body is not bounded here;
// callers bound it with their request context. Each call builds new
// Transports (their own connection pools), so build the client once per
// component and reuse it.
//
// Through a proxy, the proxy (an operator's choice, not checked) resolves
// the target's name and connects to it: this process refuses an address
// literal the policy does not allow, and cannot see where a name leads, so
// the proxy's own rules must refuse internal destinations (docs/security.md).
func (c Config) HTTPClient() *http.Client {
	c = c.WithDefaults()
	pol := c.Policy()
	proxy := c.proxyFunc()
	plain := &net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second, Resolver: c.Resolver()}
	t := &Transport{policy: pol, proxy: proxy}
	t.Direct = c.transport(nil, c.Dialer().DialContext)
	t.Proxied = c.transport(func(r *http.Request) (*url.URL, error) {
		u, err := proxy(r)
		if err == nil && u == nil {
			// RoundTrip sends only proxied requests here; never dial a
			// customer's target with the unchecked dialer.
			err = fmt.Errorf("%w: %s would not go through the proxy", ErrRefused, r.URL.Host)
		}
		return u, err
	}, plain.DialContext)
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

func (c Config) transport(proxy func(*http.Request) (*url.URL, error), dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:                 proxy,
		DialContext:           dial,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   c.Timeout,
		ResponseHeaderTimeout: c.Timeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		// Responses we read are small; a hostile server must not be able
		// to make us buffer megabytes of headers.
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// Transport is HTTPClient's transport: a request a proxy applies to goes
// to the proxy (Proxied), any other directly (Direct, whose dialer is the
// policy's). Two transports rather than one, because one transport's
// dialer cannot tell a connection to the proxy (the operator's, often an
// internal address) from a connection to a target.
type Transport struct {
	Direct  *http.Transport
	Proxied *http.Transport
	policy  *Policy
	proxy   func(*http.Request) (*url.URL, error)
}

// ProxyFor returns the proxy a request to u would go through (nil: none,
// it would be sent directly).
func (t *Transport) ProxyFor(u *url.URL) (*url.URL, error) {
	return t.proxy(&http.Request{URL: u})
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	pu, err := t.proxy(req)
	if err != nil {
		return fail(err)
	}
	if pu == nil {
		return t.Direct.RoundTrip(req)
	}
	// The proxy resolves names itself; only an address literal can be
	// judged here. A numeric host Go cannot parse but a proxy might read
	// as an address (http://2130706433/) is refused: its address is
	// unknown here.
	if host := req.URL.Hostname(); LooksLikeAddress(host) {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return fail(fmt.Errorf("%w: %q may be read as an address", ErrRefused, host))
		}
		if err := t.policy.Check("", a); err != nil {
			return fail(err)
		}
	}
	return t.Proxied.RoundTrip(req)
}

// CloseIdleConnections closes both transports' idle connections.
func (t *Transport) CloseIdleConnections() {
	t.Direct.CloseIdleConnections()
	t.Proxied.CloseIdleConnections()
}

// NoProxy reports whether HTTPClient sends every request without a proxy:
// no HTTPProxy and no HTTP_PROXY/HTTPS_PROXY in the environment (read now,
// as HTTPClient reads it when it builds the client). Callers that resolve
// names themselves ahead of a request use it: without a proxy, this
// process's resolver is the one the request will use.
func (c Config) NoProxy() bool {
	if c.HTTPProxy != "" {
		return false
	}
	env := httpproxy.FromEnvironment()
	return env.HTTPProxy == "" && env.HTTPSProxy == ""
}

func (c Config) proxyURL() (*url.URL, error) {
	raw := strings.TrimSpace(c.HTTPProxy)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("outbound: HTTP proxy %q: %w", c.HTTPProxy, err)
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return nil, fmt.Errorf("outbound: HTTP proxy %q: unsupported scheme %q", c.HTTPProxy, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("outbound: HTTP proxy %q: no host", c.HTTPProxy)
	}
	return u, nil
}

// proxyFunc returns the Transport.Proxy function. With HTTPProxy set, every
// request goes through it (including loopback targets, unlike the
// environment rules). Otherwise the environment is read when the client is
// built; this is http.ProxyFromEnvironment's logic (same package underneath)
// without its process-wide cache, so a config built later sees the current
// environment.
func (c Config) proxyFunc() func(*http.Request) (*url.URL, error) {
	if c.HTTPProxy == "" {
		env := httpproxy.FromEnvironment().ProxyFunc()
		return func(r *http.Request) (*url.URL, error) { return env(r.URL) }
	}
	u, err := c.proxyURL()
	if err != nil {
		// Fail closed: an explicitly configured proxy that cannot be used
		// must not turn into direct connections.
		return func(*http.Request) (*url.URL, error) { return nil, err }
	}
	return http.ProxyURL(u)
}
