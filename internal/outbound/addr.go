package outbound

import "net/netip"

// cgnat is the shared address space (RFC 6598).
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// blocked are the other ranges no outbound connection may reach (besides what netip's
// predicates catch): IETF protocol assignments, benchmarking,
// documentation, reserved, NAT64 and the like. Addresses are unmapped
// before they are looked up (an IPv4-mapped address is its IPv4 one).
var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network" (0.0.0.0 itself: unspecified)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"192.88.99.0/24",  // 6to4 relay anycast (deprecated)
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, and the broadcast 255.255.255.255
		"::/96",           // IPv4-compatible (deprecated; may embed a private IPv4); :: and ::1 are caught before
		"::ffff:0:0:0/96", // IPv4-translated (SIIT; may embed a private IPv4)
		"64:ff9b::/96",    // NAT64 (may embed a private IPv4)
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard-only
		"2001::/23",       // IETF protocol assignments (Teredo, ORCHIDv2...)
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4 (may embed a private IPv4)
		"3fff::/20",       // documentation (RFC 9637)
		"fec0::/10",       // site-local (deprecated)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// AddrClass names why an address is not public ("" when it is): what no
// connection made on a customer's behalf may reach unless the operator
// allowed it (Policy). An IPv4-mapped address (::ffff:0:0/96) is judged as
// the IPv4 address it carries, which is where a connection to it goes:
// ::ffff:127.0.0.1 is loopback, ::ffff:8.8.8.8 public. An address with a
// zone (fe80::1%eth0) is judged without it.
func AddrClass(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "invalid"
	}
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		if a.Is4() {
			return "private"
		}
		return "unique-local"
	case a.IsMulticast(): // link- and interface-local multicast included
		return "multicast"
	case a.IsLinkLocalUnicast():
		return "link-local"
	}
	if cgnat.Contains(a) {
		return "CGNAT"
	}
	for _, pfx := range blocked {
		if pfx.Contains(a) {
			return "reserved"
		}
	}
	return ""
}
