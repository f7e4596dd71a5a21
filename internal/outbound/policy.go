package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// The outbound policy: every connection bulkd opens on a customer's behalf
// (a company row's redirect check and each of its hops, an SMTP session of
// the verifier or the finder, a webhook delivery) may reach public
// addresses only, plus the ranges the operator allowed
// (--outbound-allow-cidrs). A name is resolved once, EVERY address it has
// is checked (a name with one internal address among public ones is
// refused whole: the dialer could otherwise fall through to it), and the
// connection goes to an address that was checked, never to the name again
// (no second lookup that a DNS answer changed in between could point
// inside). A refused target costs no connection and no wait beyond its
// DNS answer, so answer times do not tell what is reachable inside.

// ErrRefused is the error (wrapped) of a connection the policy refused.
var ErrRefused = errors.New("outbound: address not allowed")

// RefusedError says which address of which target the policy refused.
type RefusedError struct {
	Host  string     // the target as asked for: a name or an address literal
	Addr  netip.Addr // the refused address
	Class string     // AddrClass(Addr): loopback, private, link-local, ...
}

func (e *RefusedError) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("outbound: %s resolves to %s, a %s address: not allowed", e.Host, e.Addr, e.Class)
	}
	return fmt.Sprintf("outbound: %s is a %s address: not allowed", e.Addr, e.Class)
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// LoopbackPrefixes are the loopback ranges: the allowance of tests and of
// `make run`, whose mail worlds and websites listen on loopback.
var LoopbackPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Policy says which addresses connections made on a customer's behalf may
// reach: public unicast addresses (AddrClass ""), and any address in Allow.
// The zero value, and a nil *Policy, allow public addresses only.
type Policy struct {
	// Allow are ranges the operator opened on purpose (its own receivers,
	// a test world): an address in one of them is allowed whatever its
	// class.
	Allow []netip.Prefix
}

// With returns a policy that also allows extra (p is not changed).
func (p *Policy) With(extra ...netip.Prefix) *Policy {
	var allow []netip.Prefix
	if p != nil {
		allow = append(allow, p.Allow...)
	}
	return &Policy{Allow: append(allow, extra...)}
}

// Opened reports whether a is in a range the operator allowed.
func (p *Policy) Opened(a netip.Addr) bool {
	if p == nil || !a.IsValid() {
		return false
	}
	a = a.WithZone("")
	u := a.Unmap()
	for _, pfx := range p.Allow {
		if pfx.Contains(u) || pfx.Contains(a) {
			return true
		}
	}
	return false
}

// Allowed reports whether a connection to a is allowed.
func (p *Policy) Allowed(a netip.Addr) bool {
	return a.IsValid() && (p.Opened(a) || AddrClass(a) == "")
}

// Check returns nil when a is allowed, else a *RefusedError for host (the
// name a belongs to; "" for a literal).
func (p *Policy) Check(host string, a netip.Addr) error {
	if p.Allowed(a) {
		return nil
	}
	return &RefusedError{Host: host, Addr: a, Class: AddrClass(a)}
}

// CheckAll checks every address of host; the first refused one decides.
func (p *Policy) CheckAll(host string, addrs []netip.Addr) error {
	for _, a := range addrs {
		if err := p.Check(host, a); err != nil {
			return err
		}
	}
	return nil
}

// Control is a net.Dialer Control function refusing any address the
// policy does not allow: a last line under the checks made before the
// dial, so that no code path can connect elsewhere by mistake.
func (p *Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: connection to %q", ErrRefused, address)
	}
	return p.Check("", ap.Addr())
}

// ParsePrefixes parses a comma-separated list of CIDR ranges ("10.20.0.0/16,
// fd00:1::/64"); blanks are skipped. A single address (no "/") is read as
// its own range (/32 or /128).
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR range: %w", f, err)
			}
			// Addresses are judged unmapped, so an IPv4-mapped one stands for its IPv4 address.
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		pfx, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR range: %w", f, err)
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}

// Resolver looks names up: *net.Resolver, or a test's.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// maxDialAddrs bounds the addresses of one name tried in turn: a name may
// list dozens.
const maxDialAddrs = 4

// minAttempt is the least time one address is given when the dial's time
// is shared among several (net.Dialer gives each a share too, with the
// same floor).
const minAttempt = 2 * time.Second

// Dialer connects only where its policy allows: it resolves a name itself,
// refuses the whole target when any address is not allowed, and dials the
// checked addresses (never the name). An address literal is checked as
// is, without DNS. Use its DialContext as an http.Transport's.
type Dialer struct {
	Policy   *Policy  // nil: public addresses only
	Resolver Resolver // nil: net.DefaultResolver
	// Timeout bounds one DialContext call, resolution included (0:
	// DefaultTimeout).
	Timeout   time.Duration
	KeepAlive time.Duration // 0: Go's default (15 s)
}

// Resolve returns host's addresses (host without brackets), unmapped, once
// every one of them is allowed; a *RefusedError (wrapping ErrRefused) names
// the first that is not. A resolution failure is returned as the resolver
// gave it (a *net.DNSError when the name does not exist).
func (d *Dialer) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if err := d.Policy.Check("", a); err != nil {
			return nil, err
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	var r Resolver = net.DefaultResolver
	if d.Resolver != nil {
		r = d.Resolver
	}
	ias, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(ias) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, 0, len(ias))
	for _, ia := range ias {
		a, ok := netip.AddrFromSlice(ia.IP)
		if !ok {
			return nil, fmt.Errorf("outbound: resolve %s: bad address %v", host, ia.IP)
		}
		// A zone only matters for link-local addresses, which are refused
		// unless opened; keep it so an opened one stays dialable.
		a = a.Unmap().WithZone(ia.Zone)
		if err := d.Policy.Check(host, a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// DialContext connects to addr (host:port) through the policy.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	to := d.Timeout
	if to <= 0 {
		to = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	addrs, err := d.Resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var use []netip.Addr
	for _, a := range addrs {
		switch {
		case strings.HasSuffix(network, "4") && !a.Is4(), strings.HasSuffix(network, "6") && !a.Is6():
			continue
		}
		use = append(use, a)
	}
	if len(use) == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "no suitable address", Addr: host}}
	}
	use = use[:min(len(use), maxDialAddrs)]
	nd := &net.Dialer{KeepAlive: d.KeepAlive, Control: d.Policy.Control}
	var errs []error
	for i, a := range use {
		actx := ctx
		if dl, ok := ctx.Deadline(); ok && i < len(use)-1 {
			// Share the time left among the addresses left, so that a
			// first address that swallows packets does not take all of it.
			share := max(time.Until(dl)/time.Duration(len(use)-i), minAttempt)
			var c context.CancelFunc
			actx, c = context.WithTimeout(ctx, share)
			defer c()
		}
		conn, err := nd.DialContext(actx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, errors.Join(errs...)
}

// LooksLikeAddress reports whether host (without brackets or port) is an
// IP address, or a numeric form that some resolvers and proxies read as
// one although Go does not: all-digit or hex hosts and dotted forms with
// a numeric last label (2130706433, 0x7f000001, 0x7f.1, 127.1). No
// registrable domain ends in an all-numeric label, so none of them names a
// website.
func LooksLikeAddress(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	last := strings.TrimSuffix(host, ".")
	if i := strings.LastIndexByte(last, '.'); i >= 0 {
		last = last[i+1:]
	}
	if len(last) > 2 && (last[:2] == "0x" || last[:2] == "0X") {
		last = last[2:]
		return last != "" && strings.Trim(last, "0123456789abcdefABCDEF") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}
