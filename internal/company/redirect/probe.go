package redirect

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The existence probe: one DNS question decides a domain that does not
// exist, before any HTTP request.
//
// Without it a dead domain cost the HTTP stage two failed dials (http, then
// the https fallback), each resolving the name with the dialer's resolver:
// A and AAAA, and every search domain of resolv.conf first when the name has
// fewer dots than ndots (five in a Kubernetes pod), each on a new socket. The
// probe asks for the A record of the name as written, rooted (no search
// list: a company's website domain is a public name, not a host of the
// local network), on a few long-lived sockets. NXDOMAIN is a property of the
// name, not of the record type (RFC 8020), so that one answer is enough.
// Every other outcome leaves the decision to the HTTP stage, exactly as
// before: NOERROR (with or without A records: an AAAA-only site is
// followed), SERVFAIL, REFUSED, a timeout or anything unreadable.
//
// The messages are built and read with golang.org/x/net/dns/dnsmessage,
// which parses lazily: the probe reads the header, the question and, for
// NXDOMAIN, the SOA record of the authority section, and allocates next to
// nothing. A dead-domain job asks one question per row, so the probe's cost
// is most of what such a job costs.

type probeVerdict int

const (
	probeUnknown  probeVerdict = iota // no usable answer: the HTTP stage decides
	probeExists                       // NOERROR: the name exists
	probeNXDomain                     // NXDOMAIN: the name does not exist
)

const (
	// probeMaxUses is how many questions one socket asks before it is
	// replaced. Reusing sockets saves a socket, connect and close per
	// question (most of a question's cost on a fast resolver); replacing
	// them keeps the source port changing, part of what makes a forged
	// answer hard to land (RFC 5452; the random ID and the exact question
	// echoed back are the rest).
	probeMaxUses = 64
	// probeUDPSize is the EDNS0 buffer size announced and read (the DNS
	// flag day 2020 size: no IP fragmentation). Only the header, the
	// question and a SOA record are read; a longer answer is cut (TC) by
	// the server, and its header still says NOERROR or NXDOMAIN.
	probeUDPSize = 1232
)

// probeWaits are the waits for an answer after each send of the question.
// The question is sent again, with the same ID on the same socket, when a
// wait ends without an answer, and an answer to any copy is taken: a lost
// datagram (a busy resolver's full socket buffer drops them) costs half a
// second instead of the outbound timeout, and a slow resolver (a cold
// recursive lookup) is not penalised for being slower than the first wait.
// Each wait is capped by the outbound timeout, the probe by the time of a
// whole check.
var probeWaits = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}

// prober sends the existence questions. It is safe for concurrent use.
type prober struct {
	servers []string // host:port; each send goes to the next
	waits   []time.Duration
	idle    map[string]chan *probeConn // by server
	hosts   map[string]bool            // names in the hosts file: never probed
}

type probeConn struct {
	c    net.Conn
	uses int
	buf  [probeUDPSize]byte
}

// newProber returns a prober asking servers that keeps up to idle sockets
// per server for reuse (as many as probes run at once: a socket opened for a
// burst is reused by the next one); perCall caps each wait.
func newProber(servers []string, perCall time.Duration, idle int) *prober {
	p := &prober{servers: servers, idle: make(map[string]chan *probeConn, len(servers)), hosts: hostNames(hostsFile)}
	for _, s := range servers {
		p.idle[s] = make(chan *probeConn, idle)
	}
	for _, t := range probeWaits {
		p.waits = append(p.waits, min(t, perCall))
	}
	return p
}

// hostsFile is read once, when a Checker is built.
var hostsFile = "/etc/hosts"

// hostNames returns the lowercase names of a hosts file. The dialer's
// resolver reads that file before asking DNS, so a name listed there
// resolves whatever DNS says; the probe leaves such names to the HTTP
// stage. A missing or unreadable file lists nothing.
func hostNames(path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		for _, n := range fields[min(1, len(fields)):] { // the first field is the address
			names[strings.TrimSuffix(strings.ToLower(n), ".")] = true
		}
	}
	return names
}

// probeable reports whether the probe may decide canonical domain d: not
// when the dialer would not ask DNS for it (the hosts file), nor for the
// special-use names a resolver may answer by itself (RFC 6761 .localhost,
// RFC 6762 .local).
func (p *prober) probeable(d string) bool {
	if p == nil || p.hosts[d] {
		return false
	}
	return !strings.HasSuffix(d, ".localhost") && !strings.HasSuffix(d, ".local")
}

// probe asks whether canonical domain d exists, giving up at limit or when
// ctx ends. For NXDOMAIN it also returns how long the answer may be cached
// (RFC 2308: the lesser of the SOA record's TTL and its MINIMUM field; zero
// when the answer carries no SOA).
func (p *prober) probe(ctx context.Context, d string, limit time.Time) (probeVerdict, time.Duration, error) {
	name, err := dnsmessage.NewName(d + ".")
	if err != nil {
		return probeUnknown, 0, fmt.Errorf("DNS name %q: %w", d, err)
	}
	q := dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	id := uint16(rand.Uint32())
	msg, err := packQuestion(id, q)
	if err != nil {
		return probeUnknown, 0, fmt.Errorf("DNS question for %q: %w", d, err)
	}

	var pc *probeConn
	var cur string // pc's server
	stop := func() bool { return true }
	defer func() {
		stop()
		if pc != nil {
			// Unanswered: a late answer must not meet the next question.
			pc.c.Close()
		}
	}()
	var errs []error
	for i, wait := range p.waits {
		if err := ctx.Err(); err != nil {
			return probeUnknown, 0, errors.Join(append(errs, err)...)
		}
		if !time.Now().Before(limit) {
			return probeUnknown, 0, errors.Join(append(errs, context.DeadlineExceeded)...)
		}
		server := p.servers[i%len(p.servers)]
		if pc != nil && server != cur {
			stop()
			pc.c.Close()
			pc = nil
		}
		if pc == nil {
			if pc, err = p.conn(ctx, server, wait); err != nil {
				errs = append(errs, err)
				continue
			}
			cur = server
			if ctx.Done() != nil {
				// A caller that goes away interrupts the wait.
				c := pc.c
				stop = context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
			}
		}
		deadline := time.Now().Add(wait)
		if limit.Before(deadline) {
			deadline = limit
		}
		rcode, ttl, err := exchange(pc, msg, id, q, deadline)
		if err != nil {
			errs = append(errs, fmt.Errorf("DNS %s: %w", server, err))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				stop()
				pc.c.Close() // broken, not just slow
				pc = nil
			}
			continue
		}
		if stop() {
			p.release(server, pc)
		} else {
			pc.c.Close() // the cancellation touched its deadline
		}
		pc = nil
		switch rcode {
		case dnsmessage.RCodeSuccess:
			return probeExists, 0, nil
		case dnsmessage.RCodeNameError:
			return probeNXDomain, ttl, nil
		default:
			// SERVFAIL and the like say nothing about the name: the
			// resolver could not find out. It is not asked again here;
			// the HTTP stage's own lookups will be.
			return probeUnknown, 0, fmt.Errorf("DNS %s from %s", rcode, server)
		}
	}
	return probeUnknown, 0, errors.Join(errs...)
}

// packQuestion builds the query: recursion desired, one question, an EDNS0
// OPT record announcing probeUDPSize.
func packQuestion(id uint16, q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 64+len(q.Name.Data)), dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	var rh dnsmessage.ResourceHeader
	if err := rh.SetEDNS0(probeUDPSize, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// exchange sends msg on pc and waits until deadline for an answer to it
// (to this send or an earlier one: they share the ID). It returns the
// answer's response code and, for NXDOMAIN, its negative TTL.
func exchange(pc *probeConn, msg []byte, id uint16, q dnsmessage.Question, deadline time.Time) (dnsmessage.RCode, time.Duration, error) {
	if err := pc.c.SetDeadline(deadline); err != nil {
		return 0, 0, err
	}
	pc.uses++
	if _, err := pc.c.Write(msg); err != nil {
		return 0, 0, err
	}
	for {
		n, err := pc.c.Read(pc.buf[:])
		if err != nil {
			return 0, 0, err
		}
		rcode, ttl, ok := readAnswer(pc.buf[:n], id, q)
		if ok {
			return rcode, ttl, nil
		}
		// Not an answer to this question (a late one to an earlier
		// question on this socket, or junk): keep waiting.
	}
}

// readAnswer checks that raw answers question q with ID id and returns its
// response code and, for NXDOMAIN, the RFC 2308 negative TTL.
func readAnswer(raw []byte, id uint16, q dnsmessage.Question) (dnsmessage.RCode, time.Duration, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(raw)
	if err != nil || h.ID != id || !h.Response {
		return 0, 0, false
	}
	got, err := p.Question()
	if err != nil || got.Type != q.Type || got.Class != q.Class ||
		!bytes.EqualFold(got.Name.Data[:got.Name.Length], q.Name.Data[:q.Name.Length]) {
		return 0, 0, false
	}
	if h.RCode != dnsmessage.RCodeNameError {
		return h.RCode, 0, true
	}
	// The SOA of the authority section; a truncated or odd message simply
	// has none (not cached).
	var ttl time.Duration
	if p.SkipAllQuestions() == nil && p.SkipAllAnswers() == nil {
		for {
			ah, err := p.AuthorityHeader()
			if err != nil {
				break
			}
			if ah.Type != dnsmessage.TypeSOA {
				if p.SkipAuthority() != nil {
					break
				}
				continue
			}
			if soa, err := p.SOAResource(); err == nil {
				ttl = time.Duration(min(ah.TTL, soa.MinTTL)) * time.Second
			}
			break
		}
	}
	return h.RCode, ttl, true
}

// conn returns an idle socket to server or dials a new one. The socket is
// connected, so the kernel drops datagrams from anyone but the server.
func (p *prober) conn(ctx context.Context, server string, wait time.Duration) (*probeConn, error) {
	select {
	case pc := <-p.idle[server]:
		return pc, nil
	default:
	}
	d := net.Dialer{Timeout: wait}
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, fmt.Errorf("DNS %s: %w", server, err)
	}
	return &probeConn{c: c}, nil
}

func (p *prober) release(server string, pc *probeConn) {
	if pc.uses >= probeMaxUses+rand.IntN(probeMaxUses/4) { // jittered, so sockets do not all retire at once
		pc.c.Close()
		return
	}
	select {
	case p.idle[server] <- pc:
	default:
		pc.c.Close()
	}
}
