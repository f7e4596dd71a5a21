package mailworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Spec describes a world: its mail hosts, its domains, the simulated round
// trip time and, optionally, the answers a verifier is expected to give.
type Spec struct {
	Hosts   []Host
	Domains []Domain
	// RTT is the delay before the banner and before every SMTP reply on
	// every host (a simulated network round trip, applied once per read
	// burst, see the package documentation); a host's Tarpit adds to it.
	RTT   time.Duration
	Cases []Case // optional expected answers carried along
	// ProviderMaxConns caps the concurrent sessions from all clients over
	// all hosts of a Host.Provider: the connection over it gets the same
	// "421 4.7.0 Too many concurrent connections" banner as over MaxConns.
	ProviderMaxConns map[string]int
}

// Host is one mail server with its own loopback address.
type Host struct {
	Name string // "mx1.acme.test" (DNS A record -> its IP)
	IP   string // optional; otherwise assigned from 127.1.0.0/16 upward
	// MaxConns is the number of concurrent sessions allowed from all
	// clients; the next connection gets "421 4.7.0 Too many concurrent
	// connections" as banner and is closed. 0 = unlimited.
	MaxConns int
	// MaxRcpts is the number of RCPTs per session (counted across
	// transactions and RSETs); beyond it every RCPT gets "452 4.5.3 Too many
	// recipients". 0 = unlimited.
	MaxRcpts int
	// Tarpit is an extra delay before the banner and every reply.
	Tarpit time.Duration
	// RcptDelay is the time the server takes over each RCPT before it
	// answers, as Postfix's `sleep` restriction (or a slow policy or LDAP
	// lookup) does; replies to a pipelined group are written only once the
	// whole group is processed, as Postfix does, so a group of n RCPTs is
	// answered all at once after n times RcptDelay. SlowRcpts sets it.
	RcptDelay time.Duration
	// Refuse: the host has an A record but nothing listens (connection
	// refused).
	Refuse bool
	// DropAfterRcpts: when the session's N-th RCPT arrives, close the TCP
	// connection without answering it (dropped mid-session). 0 = never.
	DropAfterRcpts int
	// NoPipelining: do not advertise PIPELINING in the EHLO reply.
	NoPipelining bool
	// BlockClient: every RCPT gets a DNSBL-style block of the client's IP,
	// as Postfix's reject_rbl_client words it: "554 5.7.1 Service
	// unavailable; Client host [ip] blocked using zen.spamhaus.org; ...".
	// The truth of its addresses is unknown/blocked whatever the mailbox.
	BlockClient bool
	// BlockClientIPs blocks, as BlockClient does, only the clients
	// connecting from these addresses (a DNSBL lists addresses, not
	// senders): a verifier with several egresses sees one blocked and the
	// others answered. BlockClient without it blocks every client.
	BlockClientIPs []string
	// Aliases are more names of this server: each resolves (A) to the
	// host's IP too, and a domain's MX may name it. SMTP has no way to say
	// which name the client dialled, so the server behaves the same
	// whatever name led to it, and it counts every session to its address
	// together (MaxConns, HostStats). An alias may belong to several hosts:
	// it then resolves to all their IPs, in Spec.Hosts order (a pool, as
	// "<tenant>.mail.protection.outlook.com" resolves to a few of
	// Microsoft's front ends). A host's Name may not be another's alias.
	Aliases []string
	// Provider groups hosts run by one operator: Stats.PerProvider counts
	// their concurrent sessions together (providers count a client's
	// connections over all their IPs), and Spec.ProviderMaxConns caps them.
	Provider string
	// AcceptThenBounce: every RCPT for a domain the host serves is
	// answered "250 2.1.5 Ok", mailbox or not (after greylisting); mail to
	// a mailbox that does not exist would bounce later (HostStats.Bounces
	// counts those RCPTs). See bounce.go for the truth of its addresses.
	AcceptThenBounce bool
}

// ProviderStats are the counters of the hosts of one Host.Provider.
type ProviderStats struct {
	Sessions, Rejected421 int64
	Concurrent            int // sessions open now on all its hosts (admitted or being refused)
	MaxConcurrent         int // the highest Concurrent seen
}

// DNSKind says how the DNS server answers for a domain.
type DNSKind int

const (
	DNSMX        DNSKind = iota // MX records to Domain.MX (preference 10, 20, ... in order); default
	DNSNullMX                   // a single "MX 0 ." (RFC 7505)
	DNSNoMXWithA                // no MX; an A record for the domain itself pointing at the IP of Domain.MX[0]'s host (implicit MX, RFC 5321 5.1)
	DNSNoMail                   // name exists (NOERROR, a TXT record) but has no MX and no A/AAAA
	DNSNXDomain                 // NXDOMAIN
	DNSServFail                 // SERVFAIL for every query of the name
	DNSTimeout                  // never answer (the client must time out)
)

func (k DNSKind) String() string {
	switch k {
	case DNSMX:
		return "mx"
	case DNSNullMX:
		return "null-mx"
	case DNSNoMXWithA:
		return "no-mx-with-a"
	case DNSNoMail:
		return "no-mail"
	case DNSNXDomain:
		return "nxdomain"
	case DNSServFail:
		return "servfail"
	case DNSTimeout:
		return "timeout"
	}
	return "DNSKind(" + strconv.Itoa(int(k)) + ")"
}

// Domain is one mail domain: how DNS answers for it and which mailboxes its
// hosts accept.
type Domain struct {
	Name string
	DNS  DNSKind
	// MX lists host names (they must be in Spec.Hosts); required for DNSMX
	// and DNSNoMXWithA (where only MX[0] is used), ignored otherwise.
	MX       []string
	Users    []string // local parts that exist (compared case-insensitively)
	CatchAll bool     // every RCPT for this domain is accepted
	// Greylist: a RCPT for an address of this domain gets "450 4.7.1
	// Greylisted, try again later" until Greylist has passed since the FIRST
	// attempt for that recipient address (first seen time kept per
	// recipient, world-wide, across hosts); after that, normal behaviour.
	Greylist time.Duration
	Full     []string // local parts answered "552 5.2.2 Mailbox full"
	Disabled []string // local parts answered "550 5.2.1 Mailbox disabled"
	// SenderBlocked: local parts whose owner's own policy refuses our
	// sender: "550 5.7.1 <addr>: Sender blocked by the recipient's block
	// list". One recipient's refusal, not a block of the client: the truth
	// is undeliverable/rejected, and the host's other addresses are
	// answered as usual.
	SenderBlocked []string
}

// Case is the answer a verifier is expected to give for one address.
type Case struct {
	Email  string `json:"email"`
	Status string `json:"status"` // deliverable | undeliverable | risky | unknown
	Reason string `json:"reason"`
	// Knowable is false where no verifier can know the truth (timeouts,
	// servfail, ...): such cases are excluded from accuracy.
	Knowable bool `json:"knowable"`
}

// Stats is a snapshot of what the SMTP servers saw.
type Stats struct {
	Sessions      int64 // TCP sessions accepted (banner sent, including 421 ones)
	Rejected421   int64 // sessions refused with 421 because of MaxConns
	Rcpts         int64 // RCPT commands evaluated (after MAIL; including 452 ones and a dropped one)
	Replies452    int64
	Greylisted    int64          // 450 replies
	MaxConcurrent map[string]int // per host: the highest concurrent session count seen (admitted or being refused)
	PerHost       map[string]HostStats
	// PerIP are the same counters keyed by the server's address (the
	// politeness a server sees: clients are counted per server address).
	PerIP map[string]HostStats
	// PerProvider are the counters of each Host.Provider's hosts together.
	PerProvider map[string]ProviderStats
}

// HostStats are one host's counters.
type HostStats struct {
	Sessions, Rejected421, Rcpts, Replies452, Greylisted int64
	MaxConcurrent                                        int
	// IP is the host's (server's) address; Concurrent the sessions open
	// on it now (admitted or being refused). A host is one server address,
	// whatever names (Aliases) lead to it, so these are per address.
	IP         string
	Concurrent int
	Drops      int64 // sessions closed without a reply (DropAfterRcpts)
	Blocks     int64 // RCPTs answered with a client block (BlockClient)
	Bounces    int64 // RCPTs accepted for a mailbox that does not exist (AcceptThenBounce)
}

// World is a running mail world. Its methods are safe for concurrent use.
type World struct {
	spec    Spec
	hosts   []*host
	byName  map[string]*host
	names   map[string][]*host // every name (Name or alias) -> the hosts it resolves to
	provs   map[string]*provider
	domains map[string]*domain
	expect  map[string]Case
	expectL map[string]Case

	rtt     atomic.Int64
	port    int
	dnsAddr string
	dnsSrv  []*dns.Server
	lns     []net.Listener
	holds   []io.Closer

	done    chan struct{} // closed when the world shuts down
	watched chan struct{} // closed when the context watcher has returned
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	greyMu   sync.Mutex
	greySeen map[string]time.Time

	closeOnce sync.Once
	closeErr  error
}

type host struct {
	Host
	name   string // lower case
	ip     string
	serves map[string]bool // domains (lower case) that list this host

	admitted atomic.Int64 // sessions holding a MaxConns slot
	live     atomic.Int64 // admitted sessions plus ones being refused

	sessions, rejected421, rcpts, replies452, greylisted atomic.Int64
	maxConcurrent                                        atomic.Int64
	drops, blocks                                        atomic.Int64
	clients                                              clientLog // who greeted (clients.go)
	bounces                                              atomic.Int64
	prov                                                 *provider // nil without Provider
}

// provider counts the sessions of a Host.Provider's hosts together.
type provider struct {
	maxConns              int
	admitted, live        atomic.Int64
	maxConcurrent         atomic.Int64
	sessions, rejected421 atomic.Int64
}

type domain struct {
	Domain
	name                  string // lower case
	users, full, disabled map[string]bool
	senderBlocked         map[string]bool
	aIP                   string // DNSNoMXWithA
}

// idleTimeout closes SMTP sessions that send nothing for this long.
const idleTimeout = 5 * time.Minute

func canon(name string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(name), "."))
}

func set(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[strings.ToLower(s)] = true
	}
	return m
}

// Start starts the DNS server (UDP and TCP on 127.0.0.1:<free port>) and one
// SMTP listener per host, all on the same port. Cancelling ctx closes the
// world as Close does (call Close anyway to wait for it).
func Start(ctx context.Context, spec Spec) (*World, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &World{
		spec:     spec,
		byName:   map[string]*host{},
		names:    map[string][]*host{},
		provs:    map[string]*provider{},
		domains:  map[string]*domain{},
		expect:   map[string]Case{},
		expectL:  map[string]Case{},
		done:     make(chan struct{}),
		watched:  make(chan struct{}),
		conns:    map[net.Conn]struct{}{},
		greySeen: map[string]time.Time{},
	}
	w.rtt.Store(int64(spec.RTT))
	if err := w.build(); err != nil {
		return nil, err
	}
	if err := w.startDNS(); err != nil {
		w.shutdown()
		return nil, err
	}
	if err := w.startSMTP(); err != nil {
		w.shutdown()
		return nil, err
	}
	go func() {
		defer close(w.watched)
		select {
		case <-ctx.Done():
			w.shutdown()
		case <-w.done:
		}
	}()
	return w, nil
}

// build checks the spec and prepares the lookup tables.
func (w *World) build() error {
	if w.names == nil { // a World built by hand (tests) rather than by Start
		w.names = map[string][]*host{}
	}
	if w.provs == nil {
		w.provs = map[string]*provider{}
	}
	if err := w.buildHosts(); err != nil {
		return err
	}
	if err := w.buildDomains(); err != nil {
		return err
	}
	for _, c := range w.spec.Cases {
		w.expect[c.Email] = c
		if _, ok := w.expectL[strings.ToLower(c.Email)]; !ok {
			w.expectL[strings.ToLower(c.Email)] = c
		}
	}
	return nil
}

// buildHosts checks the spec's hosts, gives each its address (its IP, or
// the next free one of 127.1.0.0/16) and indexes them by name and alias.
func (w *World) buildHosts() error {
	used := map[string]bool{}
	for _, h := range w.spec.Hosts {
		if h.IP == "" {
			continue
		}
		ip := net.ParseIP(h.IP).To4()
		if ip == nil || ip[0] != 127 {
			return fmt.Errorf("mailworld: host %s: IP %q is not an IPv4 loopback address (127.0.0.0/8)", h.Name, h.IP)
		}
		if used[ip.String()] {
			return fmt.Errorf("mailworld: IP %s used by two hosts", ip)
		}
		used[ip.String()] = true
	}
	next := uint32(127<<24 | 1<<16) // 127.1.0.0
	assign := func() string {
		for {
			next++
			if b := next & 0xff; b == 0 || b == 255 {
				continue
			}
			ip := net.IPv4(byte(next>>24), byte(next>>16), byte(next>>8), byte(next)).String()
			if !used[ip] {
				used[ip] = true
				return ip
			}
		}
	}
	for _, h := range w.spec.Hosts {
		name := canon(h.Name)
		if name == "" {
			return errors.New("mailworld: a host has no name")
		}
		if w.byName[name] != nil {
			return fmt.Errorf("mailworld: host %s listed twice", name)
		}
		hs := &host{Host: h, name: name, serves: map[string]bool{}}
		if h.IP != "" {
			hs.ip = net.ParseIP(h.IP).To4().String()
		} else {
			hs.ip = assign()
		}
		if p := h.Provider; p != "" {
			if w.provs[p] == nil {
				w.provs[p] = &provider{maxConns: w.spec.ProviderMaxConns[p]}
			}
			hs.prov = w.provs[p]
		}
		w.hosts = append(w.hosts, hs)
		w.byName[name] = hs
		w.names[name] = []*host{hs}
	}
	for _, hs := range w.hosts {
		for _, a := range hs.Aliases {
			a = canon(a)
			if a == "" {
				return fmt.Errorf("mailworld: host %s has an empty alias", hs.name)
			}
			if w.byName[a] != nil {
				return fmt.Errorf("mailworld: host %s: alias %s is a host's name", hs.name, a)
			}
			if l := w.names[a]; len(l) == 0 || l[len(l)-1] != hs {
				w.names[a] = append(l, hs)
			}
		}
	}
	return nil
}

// buildDomains checks the spec's domains and links each to its MX hosts.
func (w *World) buildDomains() error {
	for _, d := range w.spec.Domains {
		name := canon(d.Name)
		if name == "" {
			return errors.New("mailworld: a domain has no name")
		}
		if w.domains[name] != nil {
			return fmt.Errorf("mailworld: domain %s listed twice", name)
		}
		ds := &domain{Domain: d, name: name, users: set(d.Users), full: set(d.Full), disabled: set(d.Disabled),
			senderBlocked: set(d.SenderBlocked)}
		var mx []string
		switch d.DNS {
		case DNSMX:
			mx = d.MX
		case DNSNoMXWithA:
			if len(d.MX) > 0 {
				mx = d.MX[:1]
			}
		case DNSNullMX, DNSNoMail, DNSNXDomain, DNSServFail, DNSTimeout:
		default:
			return fmt.Errorf("mailworld: domain %s: unknown DNSKind %d", name, d.DNS)
		}
		if (d.DNS == DNSMX || d.DNS == DNSNoMXWithA) && len(mx) == 0 {
			return fmt.Errorf("mailworld: domain %s (%s) needs at least one MX host", name, d.DNS)
		}
		for _, m := range mx {
			hs := w.names[canon(m)]
			if len(hs) == 0 {
				return fmt.Errorf("mailworld: domain %s: MX host %s is not in Spec.Hosts (as a name or an alias)", name, m)
			}
			for _, h := range hs {
				h.serves[name] = true
			}
			if d.DNS == DNSNoMXWithA {
				ds.aIP = hs[0].ip
			}
		}
		w.domains[name] = ds
	}
	return nil
}

func (w *World) startDNS() error {
	var lastErr error
	for range 10 {
		tl, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("mailworld: dns: %w", err)
		}
		addr := tl.Addr().String()
		pc, err := net.ListenPacket("udp4", addr)
		if err != nil {
			tl.Close()
			lastErr = err
			continue
		}
		for _, s := range []*dns.Server{{PacketConn: pc, Handler: w}, {Listener: tl, Handler: w}} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				_ = s.ActivateAndServe()
			}()
			<-started
			w.dnsSrv = append(w.dnsSrv, s)
		}
		w.dnsAddr = addr
		return nil
	}
	return fmt.Errorf("mailworld: dns: no port free for both UDP and TCP: %w", lastErr)
}

// startSMTP finds one port free on every host's address and listens on it
// (or, for Refuse hosts, holds it with a bound socket that never listens).
func (w *World) startSMTP() error {
	if len(w.hosts) == 0 {
		return nil
	}
	var lastErr error
	for range 20 {
		// Below Linux's ephemeral range (32768-60999), so the port cannot be
		// taken by an outgoing connection's local port meanwhile.
		port := 20000 + rand.IntN(12000)
		lns, holds, err := bindAll(w.hosts, port)
		if err == nil {
			w.port, w.lns, w.holds = port, lns, holds
			for i, l := range lns {
				if l == nil {
					continue
				}
				w.wg.Add(1)
				go w.accept(w.hosts[i], l)
			}
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("mailworld: smtp: %w", err)
		}
		lastErr = err
	}
	return fmt.Errorf("mailworld: smtp: no port free on every host address after 20 tries: %w", lastErr)
}

func bindAll(hosts []*host, port int) ([]net.Listener, []io.Closer, error) {
	lns := make([]net.Listener, len(hosts))
	var holds []io.Closer
	fail := func(err error) ([]net.Listener, []io.Closer, error) {
		for _, l := range lns {
			if l != nil {
				l.Close()
			}
		}
		for _, h := range holds {
			h.Close()
		}
		return nil, nil, err
	}
	for i, h := range hosts {
		addr := net.JoinHostPort(h.ip, strconv.Itoa(port))
		if h.Refuse {
			c, err := holdPort(h.ip, port)
			if err != nil {
				return fail(fmt.Errorf("hold %s: %w", addr, err))
			}
			holds = append(holds, c)
			continue
		}
		l, err := net.Listen("tcp4", addr)
		if err != nil {
			return fail(err)
		}
		lns[i] = l
	}
	return lns, holds, nil
}

func (w *World) accept(h *host, l net.Listener) {
	defer w.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-w.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off a little, as net/http does.
			if !w.sleep(10 * time.Millisecond) {
				return
			}
			continue
		}
		if !w.track(c) {
			c.Close()
			return
		}
		w.wg.Add(1)
		go w.serveSMTP(h, c)
	}
}

func (w *World) track(c net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		return false
	}
	w.conns[c] = struct{}{}
	return true
}

func (w *World) untrack(c net.Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.conns, c)
}

// sleep waits d or until the world closes; it reports whether the world is
// still running.
func (w *World) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-w.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.done:
		return false
	}
}

// DNSAddr is the DNS server's address, "127.0.0.1:PORT" (UDP and TCP).
func (w *World) DNSAddr() string { return w.dnsAddr }

// AllowCIDRs is the outbound allowance (bulkd's --outbound-allow-cidrs)
// that lets a bulkd reach a world: every host is on loopback, which the
// outbound policy refuses by default.
const AllowCIDRs = "127.0.0.0/8"

// SMTPPort is the one port every host listens on.
func (w *World) SMTPPort() int { return w.port }

// HostIP is the loopback IP of the named host (or the first IP of an
// alias), or "" if there is no such name.
func (w *World) HostIP(name string) string {
	if hs := w.names[canon(name)]; len(hs) > 0 {
		return hs[0].ip
	}
	return ""
}

// HostIPs are all the IPs a host name or alias resolves to, in DNS order.
func (w *World) HostIPs(name string) []string {
	var out []string
	for _, h := range w.names[canon(name)] {
		out = append(out, h.ip)
	}
	return out
}

// SetRTT changes the per-reply delay at run time (for new and running
// sessions).
func (w *World) SetRTT(d time.Duration) { w.rtt.Store(int64(d)) }

// RTT is the current per-reply delay.
func (w *World) RTT() time.Duration { return time.Duration(w.rtt.Load()) }

// Cases returns the spec's cases (expected answers), for accuracy checks.
func (w *World) Cases() []Case { return append([]Case(nil), w.spec.Cases...) }

// Expect returns the expected answer for email: an exact match, else one
// that differs only in letter case.
func (w *World) Expect(email string) (Case, bool) {
	if c, ok := w.expect[email]; ok {
		return c, true
	}
	c, ok := w.expectL[strings.ToLower(email)]
	return c, ok
}

// Domains lists the spec's domain names, in spec order.
func (w *World) Domains() []string {
	out := make([]string, 0, len(w.spec.Domains))
	for _, d := range w.spec.Domains {
		out = append(out, canon(d.Name))
	}
	return out
}

// Stats returns a snapshot of the counters.
func (w *World) Stats() Stats {
	s := Stats{MaxConcurrent: map[string]int{}, PerHost: map[string]HostStats{},
		PerIP: map[string]HostStats{}, PerProvider: map[string]ProviderStats{}}
	for name, p := range w.provs {
		s.PerProvider[name] = ProviderStats{Sessions: p.sessions.Load(), Rejected421: p.rejected421.Load(),
			Concurrent: int(p.live.Load()), MaxConcurrent: int(p.maxConcurrent.Load())}
	}
	for _, h := range w.hosts {
		hs := HostStats{
			Sessions:      h.sessions.Load(),
			Rejected421:   h.rejected421.Load(),
			Rcpts:         h.rcpts.Load(),
			Replies452:    h.replies452.Load(),
			Greylisted:    h.greylisted.Load(),
			MaxConcurrent: int(h.maxConcurrent.Load()),
			Drops:         h.drops.Load(),
			Blocks:        h.blocks.Load(),
			IP:            h.ip,
			Concurrent:    int(h.live.Load()),
			Bounces:       h.bounces.Load(),
		}
		s.Sessions += hs.Sessions
		s.Rejected421 += hs.Rejected421
		s.Rcpts += hs.Rcpts
		s.Replies452 += hs.Replies452
		s.Greylisted += hs.Greylisted
		s.MaxConcurrent[h.name] = hs.MaxConcurrent
		s.PerHost[h.name] = hs
		s.PerIP[h.ip] = hs
	}
	return s
}

// ResetStats sets every counter to zero; each host's MaxConcurrent starts
// again from the number of sessions open now. It does not forget greylisting
// first-seen times.
func (w *World) ResetStats() {
	for _, h := range w.hosts {
		h.sessions.Store(0)
		h.rejected421.Store(0)
		h.rcpts.Store(0)
		h.replies452.Store(0)
		h.greylisted.Store(0)
		h.drops.Store(0)
		h.blocks.Store(0)
		h.bounces.Store(0)
		h.maxConcurrent.Store(h.live.Load())
	}
	for _, p := range w.provs {
		p.sessions.Store(0)
		p.rejected421.Store(0)
		p.maxConcurrent.Store(p.live.Load())
	}
}

// Close stops the DNS server and every SMTP listener, closes every open
// session and waits for all goroutines. It is safe to call more than once.
func (w *World) Close() error {
	err := w.shutdown()
	<-w.watched
	return err
}

func (w *World) shutdown() error {
	w.closeOnce.Do(func() {
		close(w.done)
		var errs []error
		for _, s := range w.dnsSrv {
			if err := s.Shutdown(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, l := range w.lns {
			if l != nil {
				l.Close()
			}
		}
		for _, h := range w.holds {
			h.Close()
		}
		w.mu.Lock()
		for c := range w.conns {
			c.Close()
		}
		w.conns = nil
		w.mu.Unlock()
		w.wg.Wait()
		w.closeErr = errors.Join(errs...)
	})
	return w.closeErr
}
