// Package webhook announces job transitions to the URL a submission gave
// (its optional webhook_url): which targets are allowed (Policy, checked
// at submission and again at every delivery, after DNS resolution), the
// per-account signing secrets (Secrets), the Redis-backed queue of events
// (Queue), the events themselves (Sweeper: built from the jobs that reached
// a transition) and their delivery with retries (Deliverer). docs/webhooks.md
// is the user's side of it.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/outbound"
)

// MaxURLLen is the longest webhook_url accepted, in characters.
const MaxURLLen = 2048

// Resolver looks names up (net.DefaultResolver, or a test's).
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Policy says which webhook targets are allowed. Only https:// URLs whose
// host is a DNS name resolving to public addresses only: never an IP
// literal, and never a name with a private (RFC 1918), loopback,
// link-local, CGNAT, unique-local, multicast, unspecified or otherwise
// reserved address among its addresses. AllowLoopback (tests, local
// development) also lets http:// and https:// URLs reach loopback
// (127.0.0.0/8, ::1, by literal or by a name such as localhost).
type Policy struct {
	AllowLoopback bool
	// Allow are ranges an operator opens on purpose (receivers inside the
	// operator's own network): an address in one of them is allowed
	// whatever its class, as an IP literal too, over http:// or https://.
	Allow []netip.Prefix
	// Resolver resolves target names (nil: net.DefaultResolver).
	Resolver Resolver
	// ResolveTimeout bounds one resolution (0: 5 s).
	ResolveTimeout time.Duration
}

// Problem is why a URL is refused: a validation item's type and message.
type Problem struct {
	Type string // url_parsing, url_scheme, string_too_long, value_error
	Msg  string
}

func (p *Problem) Error() string { return p.Msg }

func problem(typ, format string, args ...any) *Problem {
	return &Problem{Type: typ, Msg: fmt.Sprintf(format, args...)}
}

// Problem types besides apierr's.
const (
	typeURLParsing = "url_parsing"
	typeURLScheme  = "url_scheme"
)

// CheckURL validates a webhook_url at submission: form, scheme, length,
// and the addresses its host resolves to now. nil means allowed.
func (p *Policy) CheckURL(ctx context.Context, raw string) *Problem {
	u, prob := p.parse(raw)
	if prob != nil {
		return prob
	}
	if _, err := p.resolve(ctx, u.Hostname()); err != nil {
		var pr *Problem
		if errors.As(err, &pr) {
			return pr
		}
		return problem(apierr.TypeValueError, "webhook_url host %q could not be resolved", u.Hostname())
	}
	return nil
}

// parse checks everything about a URL that needs no DNS.
func (p *Policy) parse(raw string) (*url.URL, *Problem) {
	if utf8.RuneCountInString(raw) > MaxURLLen {
		return nil, problem(apierr.TypeStringTooLong, "String should have at most %d characters", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return nil, problem(typeURLParsing, "Input should be a valid absolute URL")
	}
	host := u.Hostname()
	if host == "" {
		return nil, problem(typeURLParsing, "Input should be a valid absolute URL")
	}
	if u.User != nil {
		return nil, problem(apierr.TypeValueError, "webhook_url must not carry credentials (user:password@); events are signed instead")
	}
	scheme := strings.ToLower(u.Scheme)
	lit, litErr := netip.ParseAddr(host) // Hostname has no brackets
	opened := litErr == nil && p.opened(lit)
	loop := p.AllowLoopback && isLoopbackHost(host)
	switch {
	case scheme == "https":
	case scheme == "http" && (loop || opened):
	default:
		return nil, problem(typeURLScheme, "URL scheme should be 'https'")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return nil, problem(typeURLParsing, "Input should be a valid absolute URL (bad port)")
		}
	}
	if litErr == nil && !loop && !opened { // loop on a literal: a loopback one
		return nil, problem(apierr.TypeValueError, "webhook_url host must be a DNS name, not an IP address")
	}
	return u, nil
}

// opened reports whether a is in a range the operator opened (Allow).
func (p *Policy) opened(a netip.Addr) bool {
	a = a.Unmap()
	for _, pfx := range p.Allow {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// isLoopbackHost: a loopback literal or a name of the localhost family
// (host as url.URL.Hostname and net.SplitHostPort give it: no brackets).
func isLoopbackHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback()
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// resolve returns host's addresses (host without brackets), every one of
// them allowed, or a *Problem saying which is not (or a resolution error).
func (p *Policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if !p.Allowed(a) {
			return nil, problem(apierr.TypeValueError, "webhook_url host %s is not an allowed address", a)
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	to := p.ResolveTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	var r Resolver = net.DefaultResolver
	if p.Resolver != nil {
		r = p.Resolver
	}
	addrs, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, ia := range addrs {
		a, ok := netip.AddrFromSlice(ia.IP)
		if !ok {
			return nil, fmt.Errorf("resolve %s: bad address %v", host, ia.IP)
		}
		a = a.Unmap()
		if !p.Allowed(a) {
			return nil, problem(apierr.TypeValueError, "webhook_url host %q resolves to %s, a %s address, which webhooks may not reach", host, a, outbound.AddrClass(a))
		}
		out = append(out, a)
	}
	return out, nil
}

// Allowed reports whether a webhook may be delivered to a: a public
// unicast address (or loopback, with AllowLoopback).
func (p *Policy) Allowed(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() {
		return false
	}
	if p.opened(a) {
		return true
	}
	if a.IsLoopback() {
		return p.AllowLoopback
	}
	return outbound.AddrClass(a) == ""
}

// ErrRefused is a delivery whose target is not (or no longer) allowed.
var ErrRefused = errors.New("webhook target refused")

// DialContext connects to addr only through addresses the policy allows:
// it resolves the host itself, refuses the whole target when any of its
// addresses is not allowed (a name that points inside is refused, even
// when it also has public addresses), and dials the checked IP, so a DNS
// answer that changes between the check and the connection (rebinding)
// cannot reach an internal address. The dialer's Control refuses any other
// address as a last line.
func (p *Policy) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !p.Allowed(ap.Addr()) {
			return fmt.Errorf("%w: connection to %s", ErrRefused, address)
		}
		return nil
	}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if a, err := netip.ParseAddr(host); err == nil && !(p.AllowLoopback && a.Unmap().IsLoopback()) && !p.opened(a) {
			return nil, fmt.Errorf("%w: %s is an IP address", ErrRefused, host)
		}
		addrs, err := p.resolve(ctx, host)
		if err != nil {
			var pr *Problem
			if errors.As(err, &pr) {
				return nil, fmt.Errorf("%w: %s", ErrRefused, pr.Msg)
			}
			return nil, err
		}
		var last error
		for _, a := range addrs {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			if err == nil {
				return c, nil
			}
			last = err
			if ctx.Err() != nil {
				break
			}
		}
		return nil, last
	}
}
