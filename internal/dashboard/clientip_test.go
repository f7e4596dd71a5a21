package dashboard

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	d := &Dashboard{Deps: Deps{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("127.0.0.1/32")}}}
	none := &Dashboard{}
	var hops []string // 10.0.0.1 (left) .. 10.0.0.40 (right), all trusted
	for i := 1; i <= 40; i++ {
		hops = append(hops, fmt.Sprintf("10.0.0.%d", i))
	}
	long := strings.Join(hops, ", ")
	for _, c := range []struct {
		d      *Dashboard
		peer   string
		xff    []string
		client string
	}{
		{none, "203.0.113.1:5000", []string{"198.51.100.1"}, "203.0.113.1"},                  // no trusted proxies: the header is ignored
		{d, "203.0.113.1:5000", []string{"198.51.100.1"}, "203.0.113.1"},                     // an untrusted peer's header is ignored
		{d, "10.0.0.5:5000", nil, "10.0.0.5"},                                                // a proxy without the header: the proxy
		{d, "10.0.0.5:5000", []string{"198.51.100.1"}, "198.51.100.1"},                       // one proxy
		{d, "10.0.0.5:5000", []string{"6.6.6.6, 198.51.100.1, 10.2.2.2"}, "198.51.100.1"},    // right-most untrusted; the client's own entries are not believed
		{d, "10.0.0.5:5000", []string{"6.6.6.6", "198.51.100.1 , 10.2.2.2"}, "198.51.100.1"}, // several header lines are one list
		{d, "[fd00::1]:5000", []string{"2001:db8::7"}, "2001:db8::7"},                        // IPv6
		{d, "[::ffff:10.0.0.5]:5000", []string{"[2001:db8::7]:443"}, "2001:db8::7"},          // mapped peer, bracketed entry with a port
		{d, "10.0.0.5:5000", []string{"198.51.100.1:61000"}, "198.51.100.1"},                 // an entry with a port
		{d, "10.0.0.5:5000", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},                // a mapped entry
		{d, "10.0.0.5:5000", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},                     // all trusted: the left-most
		{d, "10.0.0.5:5000", []string{"198.51.100.1, unknown, 10.2.2.2"}, "10.2.2.2"},        // garbage stops the walk at the last trusted hop
		{d, "10.0.0.5:5000", []string{"6.6.6.6, " + long}, "10.0.0.25"},                      // at most 16 entries are read, from the right
		{d, "127.0.0.1:5000", []string{", ,198.51.100.1,"}, "198.51.100.1"},                  // empty entries are skipped
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := c.d.clientIP(r); got != c.client {
			t.Errorf("peer %s X-Forwarded-For %q: client %s, want %s", c.peer, c.xff, got, c.client)
		}
	}
}

// The sign-in throttle counts an IPv6 client by its network (issue 26,
// item 4): every address of one /64 is one client; IPv4 and IPv4-mapped
// addresses are the address.
func TestThrottleClient(t *testing.T) {
	for _, c := range []struct {
		bits int
		peer string
		want string
	}{
		{0, "[2001:db8:1:2::1]:5000", "2001:db8:1:2::/64"},
		{0, "[2001:db8:1:2:ffff:ffff:ffff:ffff]:5000", "2001:db8:1:2::/64"},
		{0, "[2001:db8:1:3::1]:5000", "2001:db8:1:3::/64"},
		{48, "[2001:db8:1:3::1]:5000", "2001:db8:1::/48"},
		{128, "[2001:db8:1:3::1]:5000", "2001:db8:1:3::1/128"},
		{0, "[::ffff:203.0.113.9]:5000", "203.0.113.9"},
		{0, "203.0.113.9:5000", "203.0.113.9"},
	} {
		d := &Dashboard{Deps: Deps{IPv6Prefix: c.bits}}
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.RemoteAddr = c.peer
		if got := d.throttleClient(r); got != c.want {
			t.Errorf("/%d %s: %s, want %s", c.bits, c.peer, got, c.want)
		}
	}
}
