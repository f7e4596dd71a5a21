package mailworld

import (
	"net"
	"slices"
	"sync"
)

// Client is one client as a host saw it: the address it connected from
// and the name it greeted with (EHLO/HELO).
type Client struct {
	IP   string
	Helo string
}

// clientLog counts a host's greetings by client. Bounded: a world's
// clients are the few egresses of the verifier under test.
type clientLog struct {
	mu   sync.Mutex
	seen map[Client]int
}

// maxClients bounds the distinct clients one host remembers.
const maxClients = 1024

func (l *clientLog) note(c net.Conn, helo string) {
	k := Client{IP: clientIP(c), Helo: helo}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[Client]int{}
	}
	if _, ok := l.seen[k]; ok || len(l.seen) < maxClients {
		l.seen[k]++
	}
}

func clientIP(c net.Conn) string {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return "unknown"
}

// blocksClient reports whether the host blocks a client at ip
// (BlockClient, BlockClientIPs).
func (h *host) blocksClient(ip string) bool {
	if len(h.BlockClientIPs) > 0 {
		return slices.Contains(h.BlockClientIPs, ip)
	}
	return h.BlockClient
}

// Clients returns how many greetings host (a name of the spec) got from
// each client (address and HELO name) since the world started; nil for an
// unknown host.
func (w *World) Clients(hostName string) map[Client]int {
	h := w.byName[canon(hostName)]
	if h == nil {
		return nil
	}
	h.clients.mu.Lock()
	defer h.clients.mu.Unlock()
	out := make(map[Client]int, len(h.clients.seen))
	for k, v := range h.clients.seen {
		out[k] = v
	}
	return out
}
