package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/outbound"
)

// fakeDNS is a test resolver: names to addresses, changeable while a test
// runs (DNS rebinding).
type fakeDNS struct {
	mu    sync.Mutex
	names map[string][]string
	calls int
}

func (f *fakeDNS) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil {
		f.names = map[string][]string{}
	}
	f.names[name] = addrs
}

func (f *fakeDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	as, ok := f.names[strings.TrimSuffix(strings.ToLower(host), ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range as {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func testDNS() *fakeDNS {
	d := &fakeDNS{}
	d.set("hooks.example.com", "93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")
	d.set("private.example.com", "10.1.2.3")
	d.set("private172.example.com", "172.20.0.1")
	d.set("private192.example.com", "192.168.1.10")
	d.set("loop.example.com", "127.0.0.1")
	d.set("loop6.example.com", "::1")
	d.set("linklocal.example.com", "169.254.169.254")
	d.set("linklocal6.example.com", "fe80::1")
	d.set("cgnat.example.com", "100.64.0.9")
	d.set("ula.example.com", "fd12:3456::1")
	d.set("multicast.example.com", "224.0.0.251")
	d.set("multicast6.example.com", "ff02::1")
	d.set("unspecified.example.com", "0.0.0.0")
	d.set("mapped.example.com", "::ffff:10.0.0.1")
	d.set("mixed.example.com", "93.184.216.34", "10.0.0.1")
	d.set("localhost", "127.0.0.1", "::1")
	return d
}

func TestCheckURL(t *testing.T) {
	p := &Policy{Resolver: testDNS()}
	loop := &Policy{Resolver: testDNS(), AllowLoopback: true}
	// An operator's own receivers in 10.1.0.0/16 (private.example.com is 10.1.2.3).
	opened := &Policy{Resolver: testDNS(), Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	ctx := context.Background()
	for _, c := range []struct {
		p    *Policy
		url  string
		typ  string // "" allowed
		want string // in the message
	}{
		{p, "https://hooks.example.com/bulkd?x=1", "", ""},
		{p, "https://hooks.example.com:8443/h", "", ""},
		{p, "HTTPS://HOOKS.example.com/h", "", ""},
		{p, "http://hooks.example.com/h", "url_scheme", "https"},
		{p, "ftp://hooks.example.com/h", "url_scheme", ""},
		{p, "hooks.example.com/h", "url_parsing", ""},
		{p, "", "url_parsing", ""},
		{p, "https:///nohost", "url_parsing", ""},
		{p, "https://user:pw@hooks.example.com/h", "value_error", "credentials"},
		{p, "https://hooks.example.com/" + strings.Repeat("a", 2049), "string_too_long", "2048"},
		{p, "https://93.184.216.34/h", "value_error", "not an IP address"},
		{p, "https://[2606:2800:220:1::1]/h", "value_error", "not an IP address"},
		{p, "https://10.0.0.1/h", "value_error", "not an IP address"},
		{p, "https://private.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://private172.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://private192.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://loop.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://loop6.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://localhost/h", "value_error", "is not an allowed target"},
		{p, "https://linklocal.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://linklocal6.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://cgnat.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://ula.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://multicast.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://multicast6.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://unspecified.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://mapped.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://mixed.example.com/h", "value_error", "is not an allowed target"},
		{p, "https://nxdomain.example.com/h", "value_error", "is not an allowed target"},
		{p, "http://127.0.0.1:8080/h", "url_scheme", ""},
		// Loopback only with the test option, by literal or localhost.
		{loop, "http://127.0.0.1:8080/h", "", ""},
		{loop, "http://[::1]:8080/h", "", ""},
		{loop, "http://localhost:8080/h", "", ""},
		{loop, "https://loop.example.com/h", "", ""},
		{loop, "http://hooks.example.com/h", "url_scheme", ""}, // http stays loopback-only
		{loop, "https://private.example.com/h", "value_error", "is not an allowed target"},
		{loop, "https://10.0.0.1/h", "value_error", "not an IP address"},
		// Ranges opened on purpose: by name or literal, http too; nothing else.
		{opened, "https://private.example.com/h", "", ""},
		{opened, "http://10.1.9.9:8080/h", "", ""},
		{opened, "https://10.1.9.9/h", "", ""},
		{opened, "http://10.2.0.1/h", "url_scheme", ""},
		{opened, "https://10.2.0.1/h", "value_error", "not an IP address"},
		{opened, "https://private172.example.com/h", "value_error", "is not an allowed target"},
		{opened, "http://hooks.example.com/h", "url_scheme", ""},
		{opened, "https://loop.example.com/h", "value_error", "is not an allowed target"},
	} {
		prob := c.p.CheckURL(ctx, c.url)
		switch {
		case c.typ == "" && prob != nil:
			t.Errorf("%.80s (loopback %v): refused: %v", c.url, c.p.AllowLoopback, prob)
		case c.typ != "" && prob == nil:
			t.Errorf("%.80s (loopback %v): allowed", c.url, c.p.AllowLoopback)
		case c.typ != "" && (prob.Type != c.typ || !strings.Contains(prob.Msg, c.want)):
			t.Errorf("%.80s: %s %q, want %s containing %q", c.url, prob.Type, prob.Msg, c.typ, c.want)
		}
		// An attacker probing the operator's DNS learns nothing past "not
		// allowed": no resolved address, no class, and an internal name
		// answers exactly as one that does not exist (issue 26, item 6).
		if prob != nil && c.want == "is not an allowed target" {
			for _, leak := range []string{"10.", "172.", "192.168", "127.", "::1", "fe80", "fd12", "100.64", "224.", "ff02", "0.0.0.0",
				"private", "loopback", "link-local", "CGNAT", "unique-local", "multicast", "unspecified", "resolve to "} {
				u, _ := url.Parse(c.url)
				rest := strings.ReplaceAll(prob.Msg, fmt.Sprintf("%q", u.Hostname()), "") // the name the customer gave
				if strings.Contains(strings.ReplaceAll(rest, "resolve to public", ""), leak) {
					t.Errorf("%.80s: the refusal %q reveals %q", c.url, prob.Msg, leak)
				}
			}
		}
	}
}

// The dialer resolves the name itself and dials only an allowed address:
// a name that now points at loopback (rebinding after the submission's
// check) is refused without a connection.
func TestDialRefusesDisallowedAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	dns := testDNS()
	p := &Policy{Resolver: dns}
	dial := p.DialContext(time.Second)
	for _, host := range []string{"loop.example.com", "private.example.com", "127.0.0.1", "localhost", "mixed.example.com"} {
		if _, err := dial(context.Background(), "tcp", net.JoinHostPort(host, port)); err == nil || !strings.Contains(err.Error(), ErrRefused.Error()) {
			t.Errorf("dial %s: %v, want refused", host, err)
		}
	}
	select {
	case <-accepted:
		t.Fatal("a refused target was connected to")
	case <-time.After(100 * time.Millisecond):
	}
	// With the test option the same loopback listener is reachable.
	lp := &Policy{Resolver: dns, AllowLoopback: true}
	c, err := lp.DialContext(time.Second)(context.Background(), "tcp", net.JoinHostPort("loop.example.com", port))
	if err != nil {
		t.Fatalf("loopback with the option: %v", err)
	}
	c.Close()
}

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"event_id":"evt_1"}`)
	at := time.Unix(1_700_000_000, 0)
	h := Sign([]string{"new", "old"}, at, body)
	if !strings.HasPrefix(h, "t=1700000000,v1=") || strings.Count(h, "v1=") != 2 {
		t.Fatalf("header %q", h)
	}
	for _, sec := range []string{"new", "old"} {
		if err := Verify(h, sec, body, 5*time.Minute, at.Add(time.Minute)); err != nil {
			t.Errorf("secret %s: %v", sec, err)
		}
	}
	if err := Verify(h, "other", body, 0, at); err == nil {
		t.Error("a wrong secret verified")
	}
	if err := Verify(h, "new", append(body, ' '), 0, at); err == nil {
		t.Error("a changed body verified")
	}
	if err := Verify(h, "new", body, 5*time.Minute, at.Add(time.Hour)); err == nil {
		t.Error("an old timestamp verified")
	}
	// v1 is HMAC-SHA256(secret, "<t>.<body>") (docs/webhooks.md): the
	// timestamp is signed, so another t with the same v1 does not verify.
	m := hmac.New(sha256.New, []byte("new"))
	m.Write([]byte("1700000000." + string(body)))
	if want := "t=1700000000,v1=" + hex.EncodeToString(m.Sum(nil)) + ","; !strings.HasPrefix(h, want) {
		t.Errorf("header %q, want it to start with %q", h, want)
	}
	if err := Verify(strings.Replace(h, "t=1700000000", "t=1700000001", 1), "new", body, 0, at); err == nil {
		t.Error("a changed timestamp verified")
	}
	if got := fmt.Sprint(EventID("j1", TypeCompleted) == EventID("j1", TypeCompleted), EventID("j1", TypeCompleted) != EventID("j2", TypeCompleted)); got != "true true" {
		t.Errorf("event ids not stable/unique: %s", got)
	}
}

// TestPolicySharesOutboundRules: webhook targets are judged by the one
// outbound policy (internal/outbound): every address class it refuses is
// refused here too, the mapped and IPv4-compatible forms included, and the
// operator's shared allowance (--outbound-allow-cidrs) opens a range for
// webhooks as --webhook-allow-cidrs does (by literal too, over http://).
func TestPolicySharesOutboundRules(t *testing.T) {
	dns := testDNS()
	dns.set("compat.example.com", "::a00:1")           // IPv4-compatible 10.0.0.1
	dns.set("thisnet.example.com", "0.1.2.3")          // 0.0.0.0/8
	dns.set("metadata.example.com", "169.254.169.254") // cloud metadata
	dns.set("mapped-loop.example.com", "::ffff:127.0.0.1")
	dns.set("shared.example.com", "10.50.0.7")
	p := &Policy{Resolver: dns}
	for _, a := range []string{"0.1.2.3", "::a00:1", "::ffff:127.0.0.1", "169.254.169.254", "100.64.0.1", "fd00::1", "192.88.99.1"} {
		addr := netip.MustParseAddr(a)
		if p.Allowed(addr) || outbound.AddrClass(addr) == "" {
			t.Errorf("Allowed(%s) = %v; the outbound policy refuses it", a, p.Allowed(addr))
		}
	}
	for _, host := range []string{"compat", "thisnet", "metadata", "mapped-loop", "shared"} {
		if prob := p.CheckURL(context.Background(), "https://"+host+".example.com/h"); prob == nil {
			t.Errorf("%s.example.com: allowed", host)
		}
	}
	shared := &Policy{Resolver: dns, Outbound: &outbound.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.50.0.0/16")}}}
	for _, u := range []string{"https://shared.example.com/h", "http://10.50.1.1:8080/h", "https://10.50.1.1/h"} {
		if prob := shared.CheckURL(context.Background(), u); prob != nil {
			t.Errorf("%s with the shared allowance: %v", u, prob)
		}
	}
	if prob := shared.CheckURL(context.Background(), "https://private.example.com/h"); prob == nil {
		t.Error("10.1.2.3 allowed by a 10.50.0.0/16 allowance")
	}
	// Both allowances add up; the loopback option adds loopback only.
	both := &Policy{Resolver: dns, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Outbound: shared.Outbound, AllowLoopback: true}
	for _, u := range []string{"https://private.example.com/h", "https://shared.example.com/h", "https://loop.example.com/h"} {
		if prob := both.CheckURL(context.Background(), u); prob != nil {
			t.Errorf("%s: %v", u, prob)
		}
	}
	if prob := both.CheckURL(context.Background(), "https://metadata.example.com/h"); prob == nil {
		t.Error("the metadata address allowed")
	}
}
