package outbound

import (
	"net/netip"
	"testing"
)

// TestAddrClass is the table of what no connection made on a customer's
// behalf may reach: every range the policy refuses, in its IPv4, IPv6 and
// IPv4-mapped forms, and public addresses next to each edge.
func TestAddrClass(t *testing.T) {
	for addr, want := range map[string]string{
		// Public.
		"8.8.8.8": "", "1.1.1.1": "", "93.184.216.34": "", "2001:4860:4860::8888": "", "2606:4700::1111": "",
		"100.63.255.255": "", "100.128.0.1": "", "172.15.255.255": "", "172.32.0.1": "", "192.167.255.255": "",
		"169.253.255.255": "", "223.255.255.255": "", "::ffff:8.8.8.8": "", "1.0.0.0": "",
		// Unspecified and "this network" (0.0.0.0/8: Linux connects 0.0.0.0 to itself).
		"0.0.0.0": "unspecified", "::": "unspecified", "0.1.2.3": "reserved", "0.255.255.255": "reserved",
		// Loopback.
		"127.0.0.1": "loopback", "127.0.0.2": "loopback", "127.255.255.254": "loopback", "::1": "loopback",
		// RFC 1918 and unique-local.
		"10.0.0.1": "private", "10.255.255.255": "private", "172.16.0.1": "private", "172.31.255.255": "private",
		"192.168.0.1": "private", "192.168.255.255": "private", "fc00::1": "unique-local", "fd12:3456::1": "unique-local",
		// Link-local, the cloud metadata address included.
		"169.254.169.254": "link-local", "169.254.0.1": "link-local", "fe80::1": "link-local", "fe80::1%eth0": "link-local",
		"fd00:ec2::254": "unique-local", // AWS's IPv6 metadata address
		// CGNAT.
		"100.64.0.1": "CGNAT", "100.127.255.255": "CGNAT",
		// Multicast.
		"224.0.0.1": "multicast", "239.255.255.250": "multicast", "ff02::1": "multicast", "ff05::2": "multicast",
		"ff01::1": "multicast",
		// Reserved, documentation, benchmarking, broadcast.
		"240.0.0.1": "reserved", "255.255.255.255": "reserved", "192.0.0.8": "reserved", "192.0.2.1": "reserved",
		"198.18.0.1": "reserved", "198.19.255.255": "reserved", "198.51.100.7": "reserved", "203.0.113.9": "reserved",
		"192.88.99.1": "reserved", "2001:db8::1": "reserved", "3fff::1": "reserved", "100::1": "reserved",
		"fec0::1": "reserved", "2001::1": "reserved",
		// IPv6 forms that embed an IPv4 address: mapped ones are judged as
		// their IPv4 address; compatible, translated, NAT64 and 6to4 ones
		// are refused whatever they embed.
		"::ffff:127.0.0.1": "loopback", "::ffff:10.0.0.1": "private", "::ffff:169.254.169.254": "link-local",
		"::ffff:100.64.0.1": "CGNAT", "::ffff:0.0.0.0": "unspecified", "::ffff:224.0.0.1": "multicast",
		"::127.0.0.1": "reserved", "::10.0.0.1": "reserved", "::8.8.8.8": "reserved", "::ffff:0:a00:1": "reserved",
		"64:ff9b::a00:1": "reserved", "64:ff9b::808:808": "reserved", "64:ff9b:1::1": "reserved", "2002:a00:1::": "reserved",
	} {
		a := netip.MustParseAddr(addr)
		if got := AddrClass(a); got != want {
			t.Errorf("AddrClass(%s) = %q, want %q", addr, got, want)
		}
	}
	if got := AddrClass(netip.Addr{}); got != "invalid" {
		t.Errorf("AddrClass(invalid) = %q", got)
	}
}

// TestPolicyAllowances: an operator's range opens exactly its addresses,
// in their mapped form too; nothing else changes.
func TestPolicyAllowances(t *testing.T) {
	var none *Policy
	open := &Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:1::/64")}}
	loop := none.With(LoopbackPrefixes...)
	for _, c := range []struct {
		p    *Policy
		addr string
		want bool
	}{
		{none, "8.8.8.8", true}, {none, "127.0.0.1", false}, {none, "10.20.1.1", false},
		{open, "10.20.1.1", true}, {open, "::ffff:10.20.1.1", true}, {open, "10.21.0.1", false},
		{open, "fd00:1::5", true}, {open, "fd00:2::5", false}, {open, "127.0.0.1", false}, {open, "8.8.8.8", true},
		{loop, "127.0.0.1", true}, {loop, "127.1.0.9", true}, {loop, "::1", true}, {loop, "::ffff:127.0.0.1", true},
		{loop, "10.0.0.1", false}, {loop, "169.254.169.254", false},
	} {
		if got := c.p.Allowed(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("%v.Allowed(%s) = %v, want %v", c.p, c.addr, got, c.want)
		}
	}
	if none.Allowed(netip.Addr{}) {
		t.Error("the invalid address is allowed")
	}
	if len(open.With(LoopbackPrefixes...).Allow) != 4 || len(open.Allow) != 2 {
		t.Error("With changed its receiver or lost ranges")
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.20.0.0/16, ,fd00:1::/64,192.0.2.7,10.1.2.3/8 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.20.0.0/16", "fd00:1::/64", "192.0.2.7/32", "10.0.0.0/8"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0/8"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted", bad)
		}
	}
}

func TestLooksLikeAddress(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "fe80::1%eth0": true, "2130706433": true, "0x7f000001": true, "0x7f.1": true,
		"127.1": true, "10.0.0.1.": true, "acme.com": false, "www.acme.com": false, "0x.example": false, "123.example": false,
		"example.0x": false, "localhost": false, "": false, "a1": false,
	} {
		if got := LooksLikeAddress(host); got != want {
			t.Errorf("LooksLikeAddress(%q) = %v, want %v", host, got, want)
		}
	}
}
