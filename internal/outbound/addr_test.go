package outbound

import (
	"net/netip"
	"testing"
)

func TestAddrClass(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8": "", "2001:4860:4860::8888": "", "10.0.0.1": "private", "100.127.255.255": "CGNAT",
		"100.128.0.1": "", "198.18.0.1": "reserved", "255.255.255.255": "reserved", "64:ff9b::a00:1": "reserved",
		"2002:a00:1::": "reserved", "fe80::1": "link-local", "::": "unspecified",
	} {
		a := netip.MustParseAddr(addr)
		if got := AddrClass(a); got != want {
			t.Errorf("AddrClass(%s) = %q, want %q", addr, got, want)
		}
	}
}
