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
	"time"
	"unicode/utf8"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/outbound"
)

// MaxURLLen is the longest webhook_url accepted, in characters.
const MaxURLLen = 2048

// Resolver looks names up (net.DefaultResolver, or a test's).
type Resolver = outbound.Resolver

// Policy says which webhook targets are allowed. Only https:// URLs whose
// host is a DNS name resolving to addresses the outbound policy allows
// (Outbound: public addresses and the operator's --outbound-allow-cidrs),
// every one of them: never an IP literal, and never a name with a private
// (RFC 1918), loopback, link-local, CGNAT, unique-local, multicast,
// unspecified or otherwise reserved address among its addresses. The rules
// on addresses are outbound's (the same for redirect checks and SMTP);
// what this type adds is the URL's form, and two webhook-only allowances:
// AllowLoopback (tests, local development) also lets http:// and https://
// URLs reach loopback (127.0.0.0/8, ::1, by literal or by a name such as
// localhost), and Allow opens more ranges for webhooks only.
type Policy struct {
	AllowLoopback bool
	// Allow are ranges an operator opens on purpose for webhooks
	// (--webhook-allow-cidrs: receivers inside the operator's own
	// network), on top of Outbound's: an address in one of them (or in
	// Outbound.Allow) is allowed whatever its class, as an IP literal too,
	// over http:// or https://.
	Allow []netip.Prefix
	// Outbound is the shared outbound policy (nil: public addresses only).
	Outbound *outbound.Policy
	// Resolver resolves target names (nil: net.DefaultResolver).
	Resolver Resolver
	// ResolveTimeout bounds one resolution (0: 5 s).
	ResolveTimeout time.Duration
}

// rules is the outbound policy of webhook connections: Outbound's, with
// the webhook-only allowances added.
func (p *Policy) rules() *outbound.Policy {
	extra := p.Allow
	if p.AllowLoopback {
		extra = append(append([]netip.Prefix(nil), extra...), outbound.LoopbackPrefixes...)
	}
	return p.Outbound.With(extra...)
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
		// The same answer as a refused address: which names exist
		// inside the operator's network is not the customer's to learn.
		return notAllowed(u.Hostname())
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

// opened reports whether a is in a range the operator opened (Allow or
// Outbound.Allow).
func (p *Policy) opened(a netip.Addr) bool {
	return p.Outbound.With(p.Allow...).Opened(a)
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

// resolveTimeout bounds one resolution of a webhook host: ResolveTimeout,
// or outbound's default when unset.
func (p *Policy) resolveTimeout() time.Duration {
	if p.ResolveTimeout > 0 {
		return p.ResolveTimeout
	}
	return outbound.DefaultTimeout
}

// resolve returns host's addresses (host without brackets), every one of
// them allowed, or a *Problem saying which is not (or a resolution error).
func (p *Policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, p.resolveTimeout())
	defer cancel()
	d := &outbound.Dialer{Policy: p.rules(), Resolver: p.Resolver}
	addrs, err := d.Resolve(ctx, host)
	var re *outbound.RefusedError
	switch {
	case errors.As(err, &re):
		// Never the address the name resolved to, nor its class: a
		// customer could otherwise map the operator's internal DNS
		// (issue 26, item 6).
		return nil, notAllowed(host)
	case err != nil:
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}

// notAllowed is the one answer to a webhook host that is refused or does
// not resolve: it names the host as given and nothing bulkd learned.
func notAllowed(host string) *Problem {
	return problem(apierr.TypeValueError,
		"webhook_url host %q is not an allowed target: webhooks go to names that resolve to public addresses only", host)
}

// Allowed reports whether a webhook may be delivered to a: an address the
// outbound policy allows (or loopback, with AllowLoopback; or one in Allow).
func (p *Policy) Allowed(a netip.Addr) bool {
	return p.rules().Allowed(a)
}

// ErrRefused is a delivery whose target is not (or no longer) allowed.
var ErrRefused = errors.New("webhook target refused")

// DialContext connects to addr only through addresses the policy allows:
// outbound's Dialer resolves the host itself, refuses the whole target when
// any of its addresses is not allowed (a name that points inside is
// refused, even when it also has public addresses), and dials the checked
// IP, so a DNS answer that changes between the check and the connection
// (rebinding) cannot reach an internal address; its Control refuses any
// other address as a last line. An IP literal is refused unless it is
// opened or (AllowLoopback) loopback, as at submission.
func (p *Policy) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if a, err := netip.ParseAddr(host); err == nil && !(p.AllowLoopback && a.Unmap().IsLoopback()) && !p.opened(a) {
			return nil, fmt.Errorf("%w: %s is an IP address", ErrRefused, host)
		}
		d := &outbound.Dialer{Policy: p.rules(), Resolver: p.Resolver, Timeout: p.resolveTimeout() + timeout}
		c, err := d.DialContext(ctx, network, addr)
		if errors.Is(err, outbound.ErrRefused) {
			return nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return c, err
	}
}
