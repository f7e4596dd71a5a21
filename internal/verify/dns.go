package verify

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// DNS cache bounds. Positive answers live for their TTL clamped to
// [minTTL, maxTTL]: the floor keeps a zero-TTL record from costing a query
// per address, the ceiling lets a changed MX take effect within the hour.
// Negative answers (NXDOMAIN, no records of the type) live negTTL, a round
// 5 minutes rather than the SOA minimum, so a domain fixed by its owner is
// seen soon. Failures (SERVFAIL, timeouts) are not cached.
const (
	minTTL          = 30 * time.Second
	maxTTL          = time.Hour
	negTTL          = 5 * time.Minute
	dnsCacheEntries = 100_000
	maxCNAMEDepth   = 8
	ednsUDPSize     = 1232 // the DNS flag day 2020 size: no IP fragmentation
)

// errDNS is a lookup that failed (SERVFAIL, REFUSED, timeout, network
// error) after its retry: the answer is unknown, not negative.
var errDNS = errors.New("dns lookup failed")

// answer is the outcome of one cached question.
type answer struct {
	nx  bool     // NXDOMAIN
	rrs []dns.RR // records of the asked type (after following CNAMEs)
}

// resolver is a small stub resolver on github.com/miekg/dns with a bounded
// TTL cache and coalescing of concurrent identical questions.
type resolver struct {
	server  string
	timeout time.Duration
	udp     *dns.Client
	tcp     *dns.Client
	cache   *ttlCache[string, answer]
	sf      singleflight.Group
	seed    uint64
	now     func() time.Time
}

func newResolver(server string, timeout time.Duration) (*resolver, error) {
	if server == "" {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("no DNS server configured and /etc/resolv.conf unreadable: %w", err)
		}
		if len(cc.Servers) == 0 {
			return nil, errors.New("no DNS server configured and none in /etc/resolv.conf")
		}
		server = net.JoinHostPort(cc.Servers[0], cc.Port)
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		return nil, fmt.Errorf("DNS server %q: %w", server, err)
	}
	return &resolver{
		server:  server,
		timeout: timeout,
		udp:     &dns.Client{Net: "udp", Timeout: timeout, UDPSize: ednsUDPSize},
		tcp:     &dns.Client{Net: "tcp", Timeout: timeout},
		cache:   newTTLCache[string, answer](dnsCacheEntries),
		seed:    rand.Uint64(),
		now:     time.Now,
	}, nil
}

// lookup answers (name, qtype) from the cache or the server. It returns
// errDNS (wrapped) when the server could not answer after one retry.
func (r *resolver) lookup(ctx context.Context, name string, qtype uint16) (answer, error) {
	return r.lookupDepth(ctx, name, qtype, 0)
}

func (r *resolver) lookupDepth(ctx context.Context, name string, qtype uint16, depth int) (answer, error) {
	name = dns.Fqdn(strings.ToLower(name))
	key := dns.TypeToString[qtype] + " " + name
	if a, ok := r.cache.get(key, r.now()); ok {
		return a, nil
	}
	// The shared query runs detached from the first caller's context (it
	// is bounded by two DNSTimeouts anyway) so one caller giving up does not
	// fail the others waiting on it; each caller still stops waiting when its
	// own context ends.
	qctx := context.WithoutCancel(ctx)
	ch := r.sf.DoChan(key, func() (any, error) {
		if a, ok := r.cache.get(key, r.now()); ok {
			return a, nil
		}
		a, ttl, next, err := r.query(qctx, name, qtype)
		if err != nil {
			return answer{}, err
		}
		if next != "" {
			// The answer ended in a CNAME whose target was not included:
			// ask for the target (bounded, so a CNAME loop ends).
			if depth >= maxCNAMEDepth {
				return answer{}, fmt.Errorf("%w: CNAME chain too long at %s", errDNS, name)
			}
			a, err = r.lookupDepth(qctx, next, qtype, depth+1)
			if err != nil {
				return answer{}, err
			}
			ttl = minTTL
		}
		r.cache.put(key, a, r.now().Add(ttl))
		return a, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return answer{}, res.Err
		}
		return res.Val.(answer), nil
	case <-ctx.Done():
		return answer{}, fmt.Errorf("%w: %s %s: %w", errDNS, dns.TypeToString[qtype], name, ctx.Err())
	}
}

// query asks the server once, retrying once on failure, and returns the
// records of qtype for name, the cache TTL, and a CNAME target to follow
// when the answer stopped at a CNAME.
func (r *resolver) query(ctx context.Context, name string, qtype uint16) (answer, time.Duration, string, error) {
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		if err := ctx.Err(); err != nil {
			return answer{}, 0, "", fmt.Errorf("%w: %s %s: %w", errDNS, dns.TypeToString[qtype], name, err)
		}
		resp, err := r.exchange(ctx, name, qtype)
		if err != nil {
			lastErr = err
			continue
		}
		switch resp.Rcode {
		case dns.RcodeSuccess:
			a, ttl, next := collect(resp, name, qtype)
			return a, ttl, next, nil
		case dns.RcodeNameError:
			return answer{nx: true}, negTTL, "", nil
		default:
			lastErr = fmt.Errorf("rcode %s", dns.RcodeToString[resp.Rcode])
		}
	}
	return answer{}, 0, "", fmt.Errorf("%w: %s %s: %w", errDNS, dns.TypeToString[qtype], name, lastErr)
}

func (r *resolver) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = true
	m.SetEdns0(ednsUDPSize, false)
	qctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, _, err := r.udp.ExchangeContext(qctx, m, r.server)
	if err == nil && resp.Truncated {
		resp, _, err = r.tcp.ExchangeContext(qctx, m, r.server)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// collect walks the answer section from name through any CNAMEs and keeps
// the records of qtype owned by the final name. It returns the CNAME target
// to ask for when the chain leaves the answer without reaching a record.
func collect(resp *dns.Msg, name string, qtype uint16) (answer, time.Duration, string) {
	cur := name
	var ttl uint32 = ^uint32(0)
	var rrs []dns.RR
	for hops := 0; hops <= maxCNAMEDepth; hops++ {
		var cname string
		for _, rr := range resp.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, cur) {
				continue
			}
			if h.Rrtype == qtype {
				rrs = append(rrs, rr)
				ttl = min(ttl, h.Ttl)
			} else if c, ok := rr.(*dns.CNAME); ok && qtype != dns.TypeCNAME {
				cname = strings.ToLower(c.Target)
				ttl = min(ttl, h.Ttl)
			}
		}
		if len(rrs) > 0 || cname == "" {
			break
		}
		cur = cname
	}
	if len(rrs) == 0 {
		if cur != name {
			return answer{}, 0, cur
		}
		return answer{}, negTTL, "" // NODATA
	}
	d := time.Duration(ttl) * time.Second
	return answer{rrs: rrs}, min(max(d, minTTL), maxTTL), ""
}

// mxHost is one mail exchanger of a domain.
type mxHost struct {
	name string // lowercase, no trailing dot
	pref uint16
}

// mxVerdict is what DNS says about a domain's mail.
type mxVerdict struct {
	reason string   // "" when hosts is usable, else an undeliverable/unknown reason
	hosts  []mxHost // in the order to try them
	// implicit is set when hosts is the domain itself (no MX, has A/AAAA).
	implicit bool
}

// lookupMX resolves a domain's mail exchangers (RFC 5321 5.1):
// MX records by preference; a null MX (RFC 7505: a single "." target)
// means the domain accepts no mail; no MX but an A or AAAA record makes the
// domain its own implicit MX; NXDOMAIN means it does not exist.
//
// Hosts of equal preference are ordered by a hash of their name and a
// per-process seed: stable within a process, so domains sharing an MX set
// land on the same host and share its sessions, but different processes
// spread over the set as RFC 5321 5.1 asks.
func (r *resolver) lookupMX(ctx context.Context, domain string) mxVerdict {
	a, err := r.lookup(ctx, domain, dns.TypeMX)
	if err != nil {
		return mxVerdict{reason: ReasonDNSError}
	}
	if a.nx {
		return mxVerdict{reason: ReasonNoSuchDomain}
	}
	var hosts []mxHost
	sawNull := false
	seen := map[string]bool{}
	for _, rr := range a.rrs {
		mx := rr.(*dns.MX)
		target := strings.TrimSuffix(strings.ToLower(mx.Mx), ".")
		if target == "" {
			sawNull = true
			continue
		}
		if seen[target] {
			continue
		}
		seen[target] = true
		hosts = append(hosts, mxHost{name: target, pref: mx.Preference})
	}
	if len(hosts) == 0 {
		if sawNull {
			return mxVerdict{reason: ReasonNullMX}
		}
		return r.implicitMX(ctx, domain)
	}
	sort.Slice(hosts, func(i, j int) bool {
		if hosts[i].pref != hosts[j].pref {
			return hosts[i].pref < hosts[j].pref
		}
		hi, hj := r.tieHash(hosts[i].name), r.tieHash(hosts[j].name)
		if hi != hj {
			return hi < hj
		}
		return hosts[i].name < hosts[j].name
	})
	return mxVerdict{hosts: hosts}
}

func (r *resolver) tieHash(s string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(r.seed >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(s))
	return h.Sum64()
}

// implicitMX is the no-MX fallback: the domain's own A, then AAAA.
func (r *resolver) implicitMX(ctx context.Context, domain string) mxVerdict {
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		a, err := r.lookup(ctx, domain, t)
		if err != nil {
			return mxVerdict{reason: ReasonDNSError}
		}
		if a.nx {
			return mxVerdict{reason: ReasonNoSuchDomain}
		}
		if len(a.rrs) > 0 {
			return mxVerdict{hosts: []mxHost{{name: domain}}, implicit: true}
		}
	}
	return mxVerdict{reason: ReasonNoMailServer}
}

// hostAddrs resolves a mail exchanger to its addresses: A records, and
// AAAA only when there is no A (our egress is IPv4-first, and a host with
// both answers on both). It returns (nil, nil) when the name has no
// address, errDNS when the lookup failed.
func (r *resolver) hostAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		a, err := r.lookup(ctx, host, t)
		if err != nil {
			return nil, err
		}
		if a.nx {
			return nil, nil
		}
		var ips []netip.Addr
		for _, rr := range a.rrs {
			var ip net.IP
			switch v := rr.(type) {
			case *dns.A:
				ip = v.A
			case *dns.AAAA:
				ip = v.AAAA
			}
			if addr, ok := netip.AddrFromSlice(ip); ok {
				ips = append(ips, addr.Unmap())
			}
		}
		if len(ips) > 0 {
			return ips, nil
		}
	}
	return nil, nil
}
