package verify

import (
	"net"
	"net/netip"
	"net/url"
	"testing"

	"github.com/bulkd/bulkd/internal/egress"
)

// A server quoting the address it sees blames us only if we know it is
// ours: through a proxy that is the egress's public_ip (the session's local
// address is our address towards the proxy).
func TestEgressClientNamesThePublicAddress(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	rep := reply{code: 550, enh: [3]int{5, 7, 1}, text: "5.7.1 Message refused: 198.51.100.7 is not allowed to send here"}
	px := &url.URL{Scheme: "socks5", Host: "10.0.0.9:1080"}
	known := egress.Egress{Name: "px", Helo: "out.example.com", Proxy: px, PublicIP: netip.MustParseAddr("198.51.100.7")}
	if c := egressClient(a, &known); c.ip != "198.51.100.7" || c.helo != "out.example.com" {
		t.Fatalf("client %+v", c)
	}
	if cl := classifyAt(rep, stageRcpt, egressClient(a, &known)); cl != rcBlocked {
		t.Errorf("with public_ip: %v, want blocked", cl)
	}
	unknown := known
	unknown.PublicIP = netip.Addr{}
	if c := egressClient(a, &unknown); c.ip != "" {
		t.Fatalf("through a proxy without public_ip the address is unknown, got %+v", c)
	}
	if cl := classifyAt(rep, stageRcpt, egressClient(a, &unknown)); cl == rcBlocked {
		t.Errorf("without public_ip another address's refusal is not ours: %v", cl)
	}
}
