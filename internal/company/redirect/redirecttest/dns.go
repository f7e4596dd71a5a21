// Package redirecttest is a DNS server on loopback for tests of the redirect
// checks: an authoritative server (github.com/miekg/dns, over UDP and TCP on
// one port) that answers from a function and counts every question, so a
// test can point outbound.Config.DNSServer at it and see what was asked.
package redirecttest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Answer is how the server answers one question.
type Answer struct {
	// Rcode is the response code (dns.RcodeSuccess unless set).
	Rcode int
	// A and AAAA are the addresses of the name; a question for the other
	// type (or any type) gets an empty NOERROR answer (NODATA).
	A, AAAA []string
	// Silent: no answer at all (a resolver that has gone away).
	Silent bool
}

// NXDomain is the answer for a name that does not exist.
var NXDomain = Answer{Rcode: dns.RcodeNameError}

// SOAMinimum is the MINIMUM field of the SOA record sent with every
// NXDOMAIN and NODATA answer (its TTL is 3600): the negative TTL (RFC 2308).
const SOAMinimum = 60

// DNS is the running server.
type DNS struct {
	// Addr is host:port for outbound.Config.DNSServer.
	Addr string
	zone func(name string) Answer

	mu        sync.Mutex
	questions map[string]int // "A name." -> count
	total     int
	inFlight  int
	maxFlight int
	// hold, when set, is called with each question before it is answered
	// (in the handler's own goroutine; handlers run concurrently).
	hold func(name string)
}

// StartDNS starts a server answering zone(name) for every question, name
// lowercase and without the final dot, and stops it when tb ends.
func StartDNS(tb testing.TB, zone func(name string) Answer) *DNS {
	tb.Helper()
	d := &DNS{zone: zone, questions: map[string]int{}}
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ { // one port for UDP and TCP
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			tb.Fatalf("redirecttest: listen udp: %v", err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if try == 20 {
			tb.Fatalf("redirecttest: listen tcp: %v", err)
		}
	}
	d.Addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: d}
	tcp := &dns.Server{Listener: ln, Handler: d}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	tb.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return d
}

// Hold makes every question wait in f before it is answered.
func (d *DNS) Hold(f func(name string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold = f
}

// GateAt holds questions until n of them are waiting at once, then lets
// them and every later question through; it proves that n questions are
// asked in parallel. If n are not waiting within wait of the first
// question, it gives up and lets everything through at once (so the test
// fails fast instead of stalling). reached reports whether n were waiting.
func (d *DNS) GateAt(n int, wait time.Duration) (reached func() bool) {
	var mu sync.Mutex
	gate := make(chan struct{})
	var timer *time.Timer
	waiting, opened, ok := 0, false, false
	open := func(success bool) {
		mu.Lock()
		defer mu.Unlock()
		if !opened {
			opened, ok = true, success
			close(gate)
		}
	}
	d.Hold(func(string) {
		mu.Lock()
		waiting++
		if timer == nil {
			timer = time.AfterFunc(wait, func() { open(false) })
		}
		full := waiting >= n
		mu.Unlock()
		if full {
			open(true)
		}
		<-gate
	})
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok
	}
}

// Questions returns how many questions of type qtype (dns.TypeA, …) were
// asked about name (without the final dot).
func (d *DNS) Questions(name string, qtype uint16) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.questions[key(name, qtype)]
}

// Total returns how many questions were asked in all.
func (d *DNS) Total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// InFlight returns how many questions are being answered now, and the
// most there have been at once.
func (d *DNS) InFlight() (now, most int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight, d.maxFlight
}

func key(name string, qtype uint16) string {
	return dns.TypeToString[qtype] + " " + strings.TrimSuffix(strings.ToLower(name), ".")
}

// ServeDNS implements dns.Handler.
func (d *DNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	d.mu.Lock()
	d.questions[key(name, q.Qtype)]++
	d.total++
	d.inFlight++
	d.maxFlight = max(d.maxFlight, d.inFlight)
	hold := d.hold
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
	}()
	if hold != nil {
		hold(name)
	}
	a := d.zone(name)
	if a.Silent {
		return
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.Rcode = a.Rcode
	add := func(t uint16, ips []string) {
		for _, ip := range ips {
			rr, err := dns.NewRR(fmt.Sprintf("%s 300 IN %s %s", q.Name, dns.TypeToString[t], ip))
			if err == nil {
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	if a.Rcode == dns.RcodeSuccess {
		switch q.Qtype {
		case dns.TypeA:
			add(dns.TypeA, a.A)
		case dns.TypeAAAA:
			add(dns.TypeAAAA, a.AAAA)
		}
	}
	if len(m.Answer) == 0 && (a.Rcode == dns.RcodeSuccess || a.Rcode == dns.RcodeNameError) {
		soa, _ := dns.NewRR(fmt.Sprintf("%s 3600 IN SOA ns.%s hostmaster.%s 1 3600 600 86400 %d", zoneOf(q.Name), zoneOf(q.Name), zoneOf(q.Name), SOAMinimum))
		m.Ns = append(m.Ns, soa)
	}
	_ = w.WriteMsg(m)
}

// zoneOf is the name's parent: the zone whose SOA a negative answer names.
func zoneOf(fqdn string) string {
	if _, parent, ok := strings.Cut(fqdn, "."); ok && parent != "" {
		return parent
	}
	return "."
}
