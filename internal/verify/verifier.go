package verify

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/publicsuffix"

	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/verify/lists"
	"github.com/bulkd/bulkd/internal/verify/rules"
)

// Config configures a Verifier. Zero values take the defaults below.
type Config struct {
	// DNSServer is "host:port"; empty: the first nameserver of
	// /etc/resolv.conf.
	DNSServer string
	// SMTPPort is the port of every MX host, default 25.
	SMTPPort int
	// HeloName is the EHLO name, default "bulkd.localhost". In production
	// set it to a name whose A record and PTR match the egress IP: many MX
	// hosts reject or tarpit clients whose EHLO name does not resolve back.
	HeloName string
	// MailFrom is the MAIL FROM address, default "verify@" + HeloName. Use
	// a mailbox that exists (bounces and abuse reports go there).
	MailFrom string
	// DNSTimeout bounds one DNS query, default 2s; a failed or timed-out
	// query is retried once.
	DNSTimeout time.Duration
	// DialTimeout bounds one TCP connect, default 5s.
	DialTimeout time.Duration
	// CommandTimeout bounds the wait for each SMTP reply, default 10s.
	// Tarpits are bounded by it.
	CommandTimeout time.Duration
	// RcptWait is what each RCPT still unanswered in a pipelined group adds
	// to CommandTimeout while its replies are awaited, default 2s: a server
	// may answer a group only once it has processed all of it (Postfix
	// does), so a slow one's first reply comes after the whole group's
	// time. A server found that slow gets smaller groups (slow.go).
	RcptWait time.Duration
	// SessionTimeout bounds a whole SMTP session, default 60s.
	SessionTimeout time.Duration
	// MaxRcptsPerSession is how many RCPTs (catch-all probes included) one
	// session sends before it quits and a new one continues, default 100:
	// RFC 5321 (4.5.3.1.8) makes every server take at least 100 recipients
	// per message, and a server that takes fewer per session says so with
	// 452 or by dropping the connection, which is learned per host. With
	// the per-host new-session rate, this is what bounds the addresses per
	// second a provider's host can be asked (docs/benchmarks.md).
	MaxRcptsPerSession int
	// MaxSessions caps concurrent SMTP sessions in this process, default
	// 256. It is not politeness (that is the limiter's, per server and
	// provider) but a bound on the process's sockets; at 64 the first
	// round of a lookup of 1,000 domains (some 660 servers, a session
	// each) queued here behind it, and a drop-after-1 server's paced
	// sessions waited in that queue after their turn had come: 492-526
	// rows/s against 548-582 at 256 (docs/benchmarks.md, "Verification
	// speed").
	MaxSessions int
	// CatchAllTTL is how long a domain's catch-all verdict is cached,
	// default 1h.
	CatchAllTTL time.Duration
	// RateLimitBackoff is how long a host that answered 421 is left alone
	// (across processes, through the limiter), default 30s.
	RateLimitBackoff time.Duration
	// GreylistRetry, when positive, makes Verify wait this long and ask a
	// greylisted address (450/451 4.7.x, or a greylisted catch-all probe)
	// once more within the same call, when ctx's deadline leaves room.
	// Greylisting delays are typically 1..5 minutes, so the default is 0:
	// answer unknown/greylisted with Temporary and RetryAfter and let the
	// caller retry later (the probe address of a domain is kept for a day so
	// the retry passes the greylist for it too). Set it for the single-address
	// API or tests whose greylisting is short.
	GreylistRetry time.Duration
	// Policy says which addresses SMTP sessions may reach (the outbound
	// policy every connection made on a customer's behalf goes through):
	// nil, the default, means public addresses only. An MX host with any
	// address the policy refuses (loopback, private, link-local, CGNAT,
	// unique-local, reserved, ...; outbound.AddrClass), and an address
	// literal naming one (user@[10.0.0.1]), gets no connection: such
	// addresses end as undeliverable/no_mail_server at once, unless another
	// MX host can be used. Test worlds on loopback set
	// outbound.LoopbackPrefixes as the allowance.
	Policy *outbound.Policy
	// Probes, when set, shares each domain's catch-all probe address with
	// every process (RedisProbes), so a retry made elsewhere passes the
	// greylist the first attempt started. Nil: per process only.
	Probes ProbeStore
	// CatchAlls, when set, shares catch-all verdicts and probe addresses
	// with every process: a domain one pod judged is not probed again by
	// another until the verdict's CatchAllTTL ends. Nil: taken from Probes
	// when that store is also a CatchAllStore (RedisProbes is), else per
	// process only.
	CatchAlls CatchAllStore
	// ThrottlePause is the first pause of a server that answered with
	// throttling ("too many connections from <us>", "too many recipients
	// from <us>", "rate limit"; isThrottle), default 5s; each throttling
	// reply after a pause ended doubles it, up to ThrottlePauseMax
	// (default 2m); an answer without throttling resets it (throttle.go).
	ThrottlePause    time.Duration
	ThrottlePauseMax time.Duration
	// BlockBackoff is how long a host whose reply blamed the client (our
	// IP on a block list, no PTR, ...; unknown/blocked) is left alone,
	// across processes through the limiter, default 30m: asking again soon
	// only deepens a block.
	BlockBackoff time.Duration
	// SessionIdle is how long a session whose work ran out, with RCPT
	// budget left, stays open (holding its politeness slot) for the next
	// Verify call to the same host (connPool in pool.go), default 2s;
	// negative: every session says QUIT when its call has nothing more.
	SessionIdle time.Duration
	// Logger receives the operator's warnings (a server blocking us);
	// nil: slog.Default().
	Logger *slog.Logger
	// Egresses are the ways out SMTP sessions may take (source addresses,
	// SOCKS5 proxies), each with its HELO name (package egress). Empty: one
	// egress, the host's route, greeting with HeloName. Politeness is kept
	// per egress and server: each egress has its own session cap, back-offs
	// and blocks (a server counts clients by address), and an egress a
	// server blocks is set aside for that server for BlockBackoff while the
	// others go on.
	Egresses []egress.Egress
	// Rules is the table of per-server rules by MX name suffix (package
	// rules: provider, reply timeout, sessions per server and per provider,
	// RCPTs per session, probe or not), read at every call so a reload
	// (NewRedisHolder) applies without a restart. Nil: the compiled-in
	// defaults.
	Rules *rules.Holder
}

func (c Config) withDefaults() Config {
	if c.SMTPPort == 0 {
		c.SMTPPort = 25
	}
	if c.HeloName == "" {
		c.HeloName = "bulkd.localhost"
	}
	mailFromSet := c.MailFrom != ""
	if c.MailFrom == "" {
		c.MailFrom = "verify@" + c.HeloName
	}
	if len(c.Egresses) == 0 {
		c.Egresses = []egress.Egress{{Name: egress.DefaultName, Helo: c.HeloName}}
	}
	c.Egresses = slices.Clone(c.Egresses)
	for i := range c.Egresses {
		e := &c.Egresses[i]
		if e.Helo == "" {
			e.Helo = c.HeloName
		}
		if e.MailFrom == "" {
			// An operator's MAIL FROM is kept for every egress; the
			// default follows each egress's HELO name, so the sender's
			// domain matches the name the server was greeted with.
			e.MailFrom = c.MailFrom
			if !mailFromSet {
				e.MailFrom = "verify@" + e.Helo
			}
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.DNSTimeout, 2*time.Second)
	def(&c.DialTimeout, 5*time.Second)
	def(&c.CommandTimeout, 10*time.Second)
	def(&c.SessionTimeout, 60*time.Second)
	def(&c.RcptWait, 2*time.Second)
	def(&c.CatchAllTTL, time.Hour)
	def(&c.RateLimitBackoff, 30*time.Second)
	def(&c.BlockBackoff, 30*time.Minute)
	def(&c.ThrottlePause, 5*time.Second)
	def(&c.ThrottlePauseMax, 2*time.Minute)
	c.ThrottlePauseMax = max(c.ThrottlePauseMax, c.ThrottlePause)
	if c.SessionIdle == 0 {
		c.SessionIdle = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CatchAlls == nil {
		c.CatchAlls, _ = c.Probes.(CatchAllStore)
	}
	if c.MaxRcptsPerSession <= 0 {
		c.MaxRcptsPerSession = 100
	}
	c.MaxRcptsPerSession = max(c.MaxRcptsPerSession, 2) // room for a probe and an address
	if c.MaxSessions <= 0 {
		c.MaxSessions = 256
	}
	return c
}

// Lists are the disposable, role and free-provider lists (package lists).
type Lists = lists.Lists

// DefaultLists returns the embedded lists.
func DefaultLists() *Lists { return lists.Default() }

// LoadListsFromRedis returns the embedded lists overlaid with the lists an
// operator stored with `bulkd admin lists sync`.
func LoadListsFromRedis(ctx context.Context, rdb redis.UniversalClient) (*Lists, error) {
	return lists.LoadFromRedis(ctx, rdb)
}

// Verifier checks addresses. It is safe for concurrent use; its DNS and
// catch-all caches are shared by all calls.
type Verifier struct {
	cfg      Config
	lists    *Lists
	limiter  HostLimiter
	perHost  int
	resolver *resolver
	sem      chan struct{}
	catchAll *ttlCache[string, bool]
	probes   *ttlCache[string, string]
	// Limits learned from 452 "too many recipients" or a drop (by
	// server.rcptKey) and from 421 on a new session while others were open
	// (by server.key), kept for limitTTL so the next calls start within
	// them.
	rcptLimits    *ttlCache[string, int]
	sessionLimits *ttlCache[string, int]
	// depths are the pipeline depths learned for slow servers (by
	// server.rcptKey, slow.go).
	depths *ttlCache[string, int]
	// paced are the servers (server.rcptKey) whose pace a group measured
	// (slow.go): their sessions' first groups are not held small.
	paced *ttlCache[string, bool]
	// blocks are the servers and providers (server.key, server.provKey)
	// that blocked this process, until their back-off ends: a later
	// session refused by the limiter's back-off answers blocked rather
	// than rate_limited.
	blocks *ttlCache[string, bool]
	// drops are the servers (server.rcptKey) whose session dropped after K answered RCPTs
	// once, with that K and when, until a later session's drop after the
	// same K confirms it as the host's limit (dropLimit).
	drops *ttlCache[string, dropSeen]
	// throttled are the servers (server.key) this process saw throttle
	// lately (throttleLevelTTL), with when, whose level a clean session
	// started after that resets; localThrottle keeps the pauses when the
	// limiter is no Throttler.
	throttled     *ttlCache[string, time.Time]
	localThrottle *LocalLimiter
	log           *slog.Logger
	pool          *connPool // sessions parked between calls
	// storeDown is when the shared catch-all store may be asked again
	// (unix ns) after it failed: a Redis outage costs one timeout per
	// storeRetry, not one per call.
	storeDown atomic.Int64
	egs       []egress.Egress

	// proxyWarned rate-limits the warning of a failing proxy to one a
	// minute per egress (every session through it would log one).
	proxyMu     sync.Mutex
	proxyWarned map[string]time.Time
}

// dropSeen is a host's unconfirmed drop: after k answered RCPTs, at at.
type dropSeen struct {
	k  int
	at time.Time
}

// localKnowledgeTTL is how long this process trusts a verdict or probe
// address it read from (or wrote to) the shared store before asking again:
// short, so a verdict that expired or was replaced in Redis is not served
// from here for long, and long enough that a busy process reads a domain at
// most once a minute.
const localKnowledgeTTL = time.Minute

// storeTimeout bounds one round trip to the shared catch-all store; the
// store is an optimisation, so on a timeout the call probes as it would
// without it.
const storeTimeout = 500 * time.Millisecond

// storeRetry is how long a failed store is left alone.
const storeRetry = 10 * time.Second

// limitTTL is how long a learned per-host limit is remembered.
const limitTTL = time.Hour

// catchAllEntries bounds the catch-all verdict cache.
const catchAllEntries = 100_000

// dnsGrace bounds how long sessions wait for the rest of a call's DNS
// lookups before they start.
const dnsGrace = 150 * time.Millisecond

// dnsConcurrency bounds the domains resolved at once by one Verify call.
const dnsConcurrency = 128

// New returns a Verifier. lists nil means DefaultLists(); limiter nil
// means an in-process LocalLimiter with default options.
func New(cfg Config, l *Lists, limiter HostLimiter) (*Verifier, error) {
	cfg = cfg.withDefaults()
	if _, err := Normalize(cfg.MailFrom); err != nil {
		return nil, fmt.Errorf("verify: MailFrom %q: %w", cfg.MailFrom, err)
	}
	if err := checkHelo(cfg.HeloName); err != nil {
		return nil, fmt.Errorf("verify: HeloName %q: %w", cfg.HeloName, err)
	}
	for _, e := range cfg.Egresses {
		if err := checkHelo(e.Helo); err != nil {
			return nil, fmt.Errorf("verify: egress %s: HELO name %q: %w", e.Name, e.Helo, err)
		}
		if _, err := Normalize(e.MailFrom); err != nil {
			return nil, fmt.Errorf("verify: egress %s: MAIL FROM %q: %w", e.Name, e.MailFrom, err)
		}
	}
	res, err := newResolver(cfg.DNSServer, cfg.DNSTimeout)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if l == nil {
		l = DefaultLists()
	}
	if limiter == nil {
		limiter = NewLocalLimiter(LimiterOptions{})
	}
	if cfg.Rules == nil {
		cfg.Rules = rules.NewHolder(nil)
	}
	perHost := 3
	if b, ok := limiter.(BackoffAwareLimiter); ok {
		perHost = max(b.SessionsPerHost(), 1)
	}
	return &Verifier{cfg: cfg, lists: l, limiter: limiter, perHost: perHost, resolver: res,
		sem: make(chan struct{}, cfg.MaxSessions), catchAll: newTTLCache[string, bool](catchAllEntries),
		probes: newTTLCache[string, string](catchAllEntries), rcptLimits: newTTLCache[string, int](catchAllEntries),
		sessionLimits: newTTLCache[string, int](catchAllEntries), depths: newTTLCache[string, int](catchAllEntries),
		paced: newTTLCache[string, bool](catchAllEntries), blocks: newTTLCache[string, bool](catchAllEntries),
		drops: newTTLCache[string, dropSeen](catchAllEntries), log: cfg.Logger, egs: cfg.Egresses, proxyWarned: map[string]time.Time{},
		pool: newConnPool(cfg.SessionIdle), throttled: newTTLCache[string, time.Time](catchAllEntries),
		localThrottle: NewLocalLimiter(LimiterOptions{})}, nil
}

// SessionIdle is how long a session with nothing more to do stays parked
// for the next call (Config.SessionIdle after defaults; negative: never).
func (v *Verifier) SessionIdle() time.Duration { return v.cfg.SessionIdle }

// checkHelo checks a HELO name: a host name, or an address literal.
func checkHelo(name string) error {
	if strings.HasPrefix(name, "[") {
		_, _, err := parseLiteral(name)
		return err
	}
	return checkHostname(strings.ToLower(name))
}

// Close ends the sessions the verifier keeps parked between calls
// (Config.SessionIdle) and gives their politeness slots back; a process
// calls it before it exits. Verify still works afterwards, without
// parking. It is safe to call more than once.
func (v *Verifier) Close() {
	v.pool.closeAll()
}

// VerifyOne checks one address; ctx's deadline bounds the answer.
func (v *Verifier) VerifyOne(ctx context.Context, email string) Result {
	return v.Verify(ctx, []string{email})[0]
}

// Verify checks emails (any order, as submitted) and returns one Result
// per input, in input order. Addresses are grouped by the primary MX host
// of their domain, so all addresses (of any domains) sharing a host are
// checked in as few sessions as possible; hosts are checked concurrently
// within MaxSessions and the limiter. It returns when every address has an
// answer or ctx ends; then unanswered ones are unknown/timeout, Temporary.
func (v *Verifier) Verify(ctx context.Context, emails []string) []Result {
	return v.VerifyEach(ctx, emails, nil)
}

// VerifyEach is Verify that also hands each answer to each as soon as it is
// known (an address is answered when its server's reply comes, not when the
// call's last server is done): idxs are the inputs (the same address may be
// given several times) and r their Result. each is called from one
// goroutine at a time, never under the call's lock, and should be quick (it
// holds back the next answers, not the sessions). Inputs still unanswered
// when ctx ends are not passed to each (their unknown/timeout is in the
// returned slice only): they were cut short, not answered.
func (v *Verifier) VerifyEach(ctx context.Context, emails []string, each func(idxs []int, r Result)) []Result {
	r := &run{v: v, ctx: ctx, hosts: map[string]*hostQ{}, hold: true, rules: v.cfg.Rules.Table()}
	results := make([]Result, len(emails))
	items := map[string]*item{}
	domains := map[string]*domainState{}
	var order []*domainState
	for i, e := range emails {
		a, err := Normalize(e)
		if err != nil {
			results[i] = v.invalid(e)
			if each != nil {
				each([]int{i}, results[i])
			}
			continue
		}
		key := a.String()
		it := items[key]
		if it == nil {
			d := domains[a.Domain]
			if d == nil {
				d = &domainState{name: a.Domain, literal: a.IP, disposable: v.lists.IsDisposable(a.Domain)}
				domains[a.Domain] = d
				order = append(order, d)
			}
			it = &item{addr: a, dom: d}
			items[key] = it
			d.items = append(d.items, it)
		}
		it.idxs = append(it.idxs, i)
	}

	stopEmit := r.startEmitting(each)
	sem := make(chan struct{}, dnsConcurrency)
	var wg sync.WaitGroup
	if v.cfg.CatchAlls != nil && len(order) > 0 {
		// What other processes learned, read while DNS resolves (sessions
		// wait for both, up to dnsGrace).
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.loadKnowledge(ctx, order)
		}()
	}
	for _, d := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			r.startDomain(d)
		}()
	}
	// Sessions start when every domain is resolved, or dnsGrace after the
	// call began if some lookups are slow: by then the domains that share an
	// MX host are queued together and share its sessions.
	grace := time.AfterFunc(dnsGrace, r.release)
	wg.Wait()
	grace.Stop()
	r.release()
	r.wg.Wait()
	stopEmit()

	checked := time.Now().UTC()
	for _, it := range items {
		res := v.result(it, checked)
		if it.emitted != nil {
			res = *it.emitted
		} else if each != nil && ctx.Err() == nil {
			each(it.idxs, res)
		}
		for _, i := range it.idxs {
			results[i] = res
		}
	}
	return results
}

func (v *Verifier) invalid(in string) Result {
	r := Result{Email: strings.TrimFunc(in, isTrimmed), Status: StatusUndeliverable, Reason: ReasonInvalidSyntax,
		CheckedAt: time.Now().UTC()}
	if len(r.Email) > maxInputLen {
		r.Email = r.Email[:maxInputLen]
	}
	return r
}

// result builds the Result of an item.
func (v *Verifier) result(it *item, checked time.Time) Result {
	a := it.addr
	dom := a.Domain
	res := Result{
		Email:        a.String(),
		ValidSyntax:  true,
		Domain:       &dom,
		IsDisposable: it.dom.disposable,
		IsRole:       v.lists.IsRole(a.Local),
		IsFree:       v.lists.IsFree(a.Domain),
		CheckedAt:    checked,
		SMTPCode:     it.code,
	}
	if !a.IsIPLiteral() {
		if s := v.lists.Suggest(a.Domain); s != "" {
			sug := a.Local + "@" + s
			res.Suggestion = &sug
		}
	}
	if !it.done {
		it.reason, it.temporary = ReasonTimeout, true
	}
	res.Reason = it.reason
	res.Status = StatusOf(it.reason)
	res.Temporary, res.RetryAfter = it.temporary, it.retryAfter
	res.IsCatchAll = it.catchAll
	res.IsDisabled = it.reason == ReasonMailboxDisabled
	res.HasFullInbox = it.reason == ReasonMailboxFull
	if it.mxHost != "" {
		h := it.mxHost
		res.MXHost = &h
		if p := providerOf(h); p != "" {
			res.Provider = &p
		}
	}
	res.Score = Score(&res)
	return res
}

// providers maps the registrable domain of an MX host to the provider name
// of the big hosted-mail services; any other host's provider is its
// registrable domain.
var providers = map[string]string{
	"google.com": "google", "googlemail.com": "google",
	"outlook.com": "microsoft", "hotmail.com": "microsoft", "office365.us": "microsoft",
	"yahoodns.net": "yahoo", "yahoo.com": "yahoo",
	"icloud.com": "apple", "apple.com": "apple", "me.com": "apple",
	"protonmail.ch": "proton", "proton.me": "proton",
	"zoho.com": "zoho", "zoho.eu": "zoho", "zohomail.com": "zoho",
	"yandex.net": "yandex", "yandex.ru": "yandex",
	"mail.ru": "mailru",
	"gmx.net": "gmx", "web.de": "gmx",
	"pphosted.com": "proofpoint", "ppe-hosted.com": "proofpoint",
	"mimecast.com": "mimecast", "mimecast.co.za": "mimecast",
	"messagelabs.com":       "broadcom",
	"barracudanetworks.com": "barracuda",
	"secureserver.net":      "godaddy",
	"qq.com":                "tencent",
}

func providerOf(host string) string {
	if strings.HasPrefix(host, "[") {
		return ""
	}
	reg, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return ""
	}
	if p, ok := providers[reg]; ok {
		return p
	}
	return reg
}

// server is what one session is counted against (limitKey): the address
// dialled and the provider the rules table names for the MX host.
type server struct {
	ip       netip.Addr
	key      string // limitKey(egress, "ip:"+ip): sessions, rate, 421 back-off, block, session limit learned
	provKey  string // limitKey(egress, "provider:"+name), "" when no rule names one: provider cap, block back-off
	rcptKey  string // the RCPTs per session learned: the provider's when known, else the server's; any egress
	provider string
	egress   int // the index of the egress (Verifier.egs) the session goes through
}

// serverOf builds the keys of a session to ip for an MX host under rule.
// egress is the egress's name (Egress.Name; "" is DefaultEgress).
func serverOf(egress string, ip netip.Addr, rule rules.Rule) server {
	s := server{ip: ip, key: ServerKey(egress, ip.String()), provider: rule.Provider}
	s.rcptKey = ServerKey(AnyEgress, ip.String())
	if rule.Provider != "" {
		s.provKey = ProviderKey(egress, rule.Provider)
		s.rcptKey = ProviderKey(AnyEgress, rule.Provider)
	}
	return s
}

// WatchLists reloads l whenever an operator stores a list (`bulkd admin
// lists sync`), until ctx ends: announced through Redis pub/sub, checked
// every 30 s in case an announcement was missed (lists.Watch).
func WatchLists(ctx context.Context, rdb redis.UniversalClient, l *Lists, log *slog.Logger) {
	lists.Watch(ctx, rdb, l, lists.WatchOptions{Log: log})
}
