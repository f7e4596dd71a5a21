package dashboard

import (
	"net/http"
	"net/netip"
	"strings"
)

// maxForwardedHops bounds how many X-Forwarded-For entries are read, from
// the right: no real chain of proxies is longer, and the header is the
// client's to make as long as the server's header limit allows.
const maxForwardedHops = 16

// clientIP is the address the sign-in throttle counts a request against.
//
// It is the TCP peer, unless the peer is one of Deps.TrustedProxies (the
// ingress or load balancer in front of bulkd): then X-Forwarded-For is
// read from the right, each trusted proxy's entry skipped, and the first
// address not in a trusted range is the client: the right-most untrusted
// address, the one the outermost trusted proxy saw. Entries left of it
// are whatever the client sent and are never believed. A peer that is not
// trusted is never asked: anyone can send the header.
//
// When every entry is trusted (a client inside the trusted ranges), the
// left-most one read is used; an entry that is not an address (a proxy
// writing "unknown") stops the walk at the last trusted hop, which is
// then counted as the client (conservative: it never splits one client
// into many).
func (d *Dashboard) clientIP(r *http.Request) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr // not from a TCP listener (tests' recorders)
	}
	addr := peer.Addr().Unmap()
	if !d.trusted(addr) {
		return addr.String()
	}
	vals := r.Header.Values("X-Forwarded-For")
	hops := 0
	for i := len(vals) - 1; i >= 0 && hops < maxForwardedHops; i-- {
		v := vals[i]
		for v != "" && hops < maxForwardedHops {
			var entry string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				entry, v = v, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			hops++
			a, ok := forwardedAddr(entry)
			if !ok {
				return addr.String()
			}
			addr = a
			if !d.trusted(addr) {
				return addr.String()
			}
		}
	}
	return addr.String()
}

// throttleClient is who the sign-in throttle counts for r: its client's
// IPv4 address, or its IPv6 address's network (the /64 by default, what
// one subscriber gets: counted by /128, one attacker was 2^64 clients;
// issue 26, item 4). An IPv4-mapped address is its IPv4 address.
func (d *Dashboard) throttleClient(r *http.Request) string {
	c := d.clientIP(r)
	a, err := netip.ParseAddr(c)
	if err != nil || a.Unmap().Is4() {
		if err == nil {
			return a.Unmap().String()
		}
		return c
	}
	bits := d.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	p, _ := a.WithZone("").Prefix(bits)
	return p.String()
}

// forwardedAddr reads one X-Forwarded-For entry: an IPv4 or IPv6 address,
// also as some proxies write it with a port ("203.0.113.9:51234",
// "[2001:db8::1]:51234") or in brackets.
func forwardedAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

func (d *Dashboard) trusted(a netip.Addr) bool {
	for _, p := range d.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
