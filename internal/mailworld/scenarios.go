package mailworld

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Expected statuses.
const (
	Deliverable   = "deliverable"
	Undeliverable = "undeliverable"
	Risky         = "risky"
	Unknown       = "unknown"
)

// ClassOptions tunes Classes.
type ClassOptions struct {
	Greylist time.Duration // greylisting period of grey.test; default 1s
	Tarpit   time.Duration // extra delay of mx.tarpit.test; default 3s (longer than a verifier's command timeout should be)
	RTT      time.Duration // simulated round trip; default 0
}

func ok(email string) Case { return Case{email, Deliverable, "accepted", true} }
func bad(email, reason string) Case {
	return Case{email, Undeliverable, reason, true}
}
func risky(email, reason string) Case { return Case{email, Risky, reason, true} }
func unknown(email, reason string) Case {
	return Case{email, Unknown, reason, false}
}

// Classes is one domain per class of mailbox and failure, with the answers
// a verifier is expected to give (Spec.Cases):
//
//	ok.test          alice, bob, Carol exist; nobody is 550 5.1.1
//	catchall.test    accepts every RCPT: risky/catch_all
//	grey.test        450 4.7.1 for Greylist after the first attempt per address,
//	                 then normal: alice deliverable/accepted (a verifier that
//	                 gives up instead reports unknown/greylisted, which counts as wrong)
//	limited.test     mx.limited.test allows 1 session at a time; six users:
//	                 a polite verifier gets all answers and no 421
//	many.test        mx.many.test allows 3 RCPTs per session; 8 users and 3
//	                 unknowns: every answer must still be exact
//	tarpit.test      mx.tarpit.test waits Tarpit before every reply: unknown/timeout
//	full.test        max is 552 5.2.2: risky/mailbox_full          } all on the shared
//	disabled.test    old is 550 5.2.1: undeliverable/mailbox_disabled } host
//	shared-a.test,   ordinary domains                               } mx.provider.test
//	shared-b.test
//	nullmx.test      MX 0 "."  : undeliverable/null_mx
//	implicit.test    no MX, A record -> web.implicit.test, which accepts alice
//	nomail.test      only a TXT record: undeliverable/no_mail_server
//	nxdomain.test    NXDOMAIN: undeliverable/no_such_domain
//	servfail.test    SERVFAIL: unknown/dns_error
//	dnstimeout.test  no DNS answer: unknown/dns_error
//	refused.test     its only MX refuses connections: unknown/connection_failed
//	dropped.test     its MX drops the connection at the first RCPT: unknown/smtp_error
//	backup.test      first MX refuses, second accepts alice: deliverable/accepted
//	nopipe.test      MX does not advertise PIPELINING
//
// plus two addresses of invalid syntax (undeliverable/invalid_syntax).
func Classes(opts ClassOptions) Spec {
	if opts.Greylist <= 0 {
		opts.Greylist = time.Second
	}
	if opts.Tarpit <= 0 {
		opts.Tarpit = 3 * time.Second
	}
	s := Spec{RTT: opts.RTT}
	s.Hosts = []Host{
		NewHost("mx.ok.test"),
		NewHost("mx.catchall.test"),
		NewHost("mx.grey.test"),
		NewHost("mx.limited.test", Limits(1, 0)),
		NewHost("mx.many.test", Limits(0, 3)),
		NewHost("mx.tarpit.test", Tarpits(opts.Tarpit)),
		NewHost("mx.provider.test"),
		NewHost("web.implicit.test"),
		NewHost("mx.refused.test", Refuses()),
		NewHost("mx.dropped.test", DropsAfter(0)),
		NewHost("mx1.backup.test", Refuses()),
		NewHost("mx2.backup.test"),
		NewHost("mx.nopipe.test", NoPipelining()),
	}
	mx := func(name string, hosts ...string) Domain { return Domain{Name: name, MX: hosts} }

	okd := mx("ok.test", "mx.ok.test")
	okd.Users = []string{"alice", "bob", "carol"}
	catch := mx("catchall.test", "mx.catchall.test")
	catch.CatchAll, catch.Users = true, []string{"info"}
	grey := mx("grey.test", "mx.grey.test")
	grey.Greylist, grey.Users = opts.Greylist, []string{"alice"}
	limited := mx("limited.test", "mx.limited.test")
	limited.Users = []string{"u1", "u2", "u3", "u4", "u5", "u6"}
	many := mx("many.test", "mx.many.test")
	many.Users = []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}
	tarpit := mx("tarpit.test", "mx.tarpit.test")
	tarpit.Users = []string{"alice"}
	full := mx("full.test", "mx.provider.test")
	full.Users, full.Full = []string{"alice"}, []string{"max"}
	disabled := mx("disabled.test", "mx.provider.test")
	disabled.Users, disabled.Disabled = []string{"alice"}, []string{"old"}
	sharedA := mx("shared-a.test", "mx.provider.test")
	sharedA.Users = []string{"alice", "bob"}
	sharedB := mx("shared-b.test", "mx.provider.test")
	sharedB.Users = []string{"alice", "bob"}
	implicit := Domain{Name: "implicit.test", DNS: DNSNoMXWithA, MX: []string{"web.implicit.test"}, Users: []string{"alice"}}
	refused := mx("refused.test", "mx.refused.test")
	refused.Users = []string{"alice"}
	dropped := mx("dropped.test", "mx.dropped.test")
	dropped.Users = []string{"alice"}
	backup := mx("backup.test", "mx1.backup.test", "mx2.backup.test")
	backup.Users = []string{"alice"}
	nopipe := mx("nopipe.test", "mx.nopipe.test")
	nopipe.Users = []string{"alice", "bob"}
	s.Domains = []Domain{okd, catch, grey, limited, many, tarpit, full, disabled, sharedA, sharedB,
		{Name: "nullmx.test", DNS: DNSNullMX},
		implicit,
		{Name: "nomail.test", DNS: DNSNoMail},
		{Name: "nxdomain.test", DNS: DNSNXDomain},
		{Name: "servfail.test", DNS: DNSServFail},
		{Name: "dnstimeout.test", DNS: DNSTimeout},
		refused, dropped, backup, nopipe,
	}

	s.Cases = classCases(limited.Users, many.Users)
	return s
}

// classCases is the truth of Classes' addresses (limited and many: the
// mailboxes of limited.test and many.test).
func classCases(limited, many []string) []Case {
	cases := []Case{
		ok("alice@ok.test"), ok("bob@ok.test"), ok("Carol@ok.test"),
		bad("nobody@ok.test", "mailbox_not_found"),
		risky("info@catchall.test", "catch_all"),
		risky("x7q2k9-anything@catchall.test", "catch_all"),
		ok("alice@grey.test"),
		bad("ghost@grey.test", "mailbox_not_found"),
	}
	for _, u := range limited {
		cases = append(cases, ok(u+"@limited.test"))
	}
	cases = append(cases, bad("nobody@limited.test", "mailbox_not_found"))
	for i, u := range many {
		cases = append(cases, ok(u+"@many.test"))
		if i%3 == 1 {
			cases = append(cases, bad(fmt.Sprintf("x%d@many.test", i/3+1), "mailbox_not_found"))
		}
	}
	cases = append(cases,
		unknown("alice@tarpit.test", "timeout"),
		ok("alice@full.test"),
		risky("max@full.test", "mailbox_full"),
		ok("alice@disabled.test"),
		bad("old@disabled.test", "mailbox_disabled"),
		ok("alice@shared-a.test"), ok("bob@shared-a.test"),
		bad("carol@shared-a.test", "mailbox_not_found"),
		ok("alice@shared-b.test"), ok("bob@shared-b.test"),
		bad("dave@shared-b.test", "mailbox_not_found"),
		bad("alice@nullmx.test", "null_mx"),
		ok("alice@implicit.test"),
		bad("nobody@implicit.test", "mailbox_not_found"),
		bad("alice@nomail.test", "no_mail_server"),
		bad("alice@nxdomain.test", "no_such_domain"),
		unknown("alice@servfail.test", "dns_error"),
		unknown("alice@dnstimeout.test", "dns_error"),
		unknown("alice@refused.test", "connection_failed"),
		// The connection was made and the server greeted: the failure is in
		// the SMTP dialogue (the RCPT was never answered), not in reaching
		// the server, hence smtp_error rather than connection_failed.
		unknown("alice@dropped.test", "smtp_error"),
		ok("alice@backup.test"),
		bad("nobody@backup.test", "mailbox_not_found"),
		ok("alice@nopipe.test"), ok("bob@nopipe.test"),
		bad("nobody@nopipe.test", "mailbox_not_found"),
		bad("not-an-email", "invalid_syntax"),
		bad("alice@", "invalid_syntax"),
	)
	return cases
}

// BenchOptions tunes Bench; zero fields take the defaults.
type BenchOptions struct {
	Domains         int           // default 200
	PerDomain       int           // addresses per domain; default 10
	RTT             time.Duration // default 50ms (SetRTT changes it later, also to 0)
	MaxConnsPerHost int           // MaxConns of every host; default 3
	Seed            int64         // the same seed gives the same world
}

// Bench is the benchmark's world: Domains domains of PerDomain addresses
// each, a Case for every address (in shuffled order, as a real upload).
// About 40% of the domains that receive mail are hosted on four shared
// provider hosts, the rest each on its own MX host; every host has
// MaxConns = MaxConnsPerHost and MaxRcpts = 100. The mix: 3% null-MX and 3%
// NXDOMAIN domains, 8% catch-all domains, 3% domains greylisting for 2s
// (their addresses are expected to be answered exactly after a retry); in
// the other domains about 20% of addresses are unknown users and about 2%
// each full and disabled mailboxes, the rest exist.
func Bench(opts BenchOptions) Spec {
	if opts.Domains <= 0 {
		opts.Domains = 200
	}
	if opts.PerDomain <= 0 {
		opts.PerDomain = 10
	}
	if opts.RTT == 0 {
		opts.RTT = 50 * time.Millisecond
	}
	if opts.RTT < 0 {
		opts.RTT = 0
	}
	if opts.MaxConnsPerHost <= 0 {
		opts.MaxConnsPerHost = 3
	}
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x6d61696c776f726c)) // "mailworl"
	const maxRcpts = 100
	providers := []string{"mx.bigmail.test", "mx.postbox.test", "mx.mailhaus.test", "mx.inboxly.test"}
	s := Spec{RTT: opts.RTT}
	for _, p := range providers {
		s.Hosts = append(s.Hosts, NewHost(p, Limits(opts.MaxConnsPerHost, maxRcpts)))
	}

	n := opts.Domains
	count := func(frac float64) int { return int(math.Round(float64(n) * frac)) }
	classes := make([]benchClass, n)
	i := 0
	for _, c := range []struct {
		k benchClass
		n int
	}{{benchNullMX, count(0.03)}, {benchNXDomain, count(0.03)}, {benchCatchAll, count(0.08)}, {benchGreylist, count(0.03)}} {
		for j := 0; j < c.n && i < n; j++ {
			classes[i] = c.k
			i++
		}
	}
	rng.Shuffle(n, func(a, b int) { classes[a], classes[b] = classes[b], classes[a] })

	for di := range n {
		name := fmt.Sprintf("%s-%03d.test", words[rng.IntN(len(words))], di+1)
		d := Domain{Name: name}
		switch classes[di] {
		case benchNullMX:
			d.DNS = DNSNullMX
		case benchNXDomain:
			d.DNS = DNSNXDomain
		default:
			if rng.Float64() < 0.4 {
				d.MX = []string{providers[rng.IntN(len(providers))]}
			} else {
				h := "mx." + name
				s.Hosts = append(s.Hosts, NewHost(h, Limits(opts.MaxConnsPerHost, maxRcpts)))
				d.MX = []string{h}
			}
		}
		if classes[di] == benchCatchAll {
			d.CatchAll = true
		}
		if classes[di] == benchGreylist {
			d.Greylist = 2 * time.Second
		}
		s.Cases = benchAddresses(rng, s.Cases, &d, classes[di], opts.PerDomain)
		s.Domains = append(s.Domains, d)
	}
	rng.Shuffle(len(s.Cases), func(a, b int) { s.Cases[a], s.Cases[b] = s.Cases[b], s.Cases[a] })
	return s
}

// What kind of domain a Bench domain is.
type benchClass int

const (
	benchNormal benchClass = iota
	benchNullMX
	benchNXDomain
	benchCatchAll
	benchGreylist
)

// benchAddresses draws perDomain addresses of the Bench domain d of class
// cl (its mailboxes into d) and appends their truth to cases.
func benchAddresses(rng *rand.Rand, cases []Case, d *Domain, cl benchClass, perDomain int) []Case {
	seen := map[string]bool{}
	for range perDomain {
		var local string
		for {
			local = firstNames[rng.IntN(len(firstNames))] + "." + lastNames[rng.IntN(len(lastNames))]
			if !seen[local] {
				break
			}
			local += fmt.Sprint(rng.IntN(100))
			if !seen[local] {
				break
			}
		}
		seen[local] = true
		email := local + "@" + d.Name
		r := rng.Float64()
		switch cl {
		case benchNullMX:
			cases = append(cases, bad(email, "null_mx"))
		case benchNXDomain:
			cases = append(cases, bad(email, "no_such_domain"))
		case benchCatchAll:
			if r < 0.8 {
				d.Users = append(d.Users, local)
			}
			cases = append(cases, risky(email, "catch_all"))
		default:
			switch {
			case r < 0.20:
				cases = append(cases, bad(email, "mailbox_not_found"))
			case r < 0.22:
				d.Full = append(d.Full, local)
				cases = append(cases, risky(email, "mailbox_full"))
			case r < 0.24:
				d.Disabled = append(d.Disabled, local)
				cases = append(cases, bad(email, "mailbox_disabled"))
			default:
				d.Users = append(d.Users, local)
				cases = append(cases, ok(email))
			}
		}
	}
	return cases
}

// Demo is the small world `make run` starts (hack/run-local.sh), with no
// delays:
//
//	acme.test      alice and bob exist, anybody else is unknown
//	initech.test   jane.doe, john.smith, anne-marie.oneil, jose.nunez, jan.vanderberg
//	               ({first}.{last}: the email-lookup quickstart)
//	catchall.test  accepts everything
//	grey.test      greylists every address for 20s after its first attempt
//	full.test      max's mailbox is full, alice's is fine
//	nullmx.test    accepts no mail (MX 0 ".")
//	nxdomain.test  does not exist
func Demo() Spec {
	return Spec{
		Hosts: []Host{
			{Name: "mx.acme.test"},
			{Name: "mx.catchall.test"},
			{Name: "mx.grey.test"},
			{Name: "mx.full.test"},
			{Name: "mx.initech.test"},
		},
		Domains: []Domain{
			{Name: "acme.test", MX: []string{"mx.acme.test"}, Users: []string{"alice", "bob"}},
			// People for the email-lookup quickstart: one {first}.{last}
			// company (grey.test, catchall.test and nxdomain.test serve the
			// other answers).
			{Name: "initech.test", MX: []string{"mx.initech.test"},
				Users: []string{"jane.doe", "john.smith", "anne-marie.oneil", "jose.nunez", "jan.vanderberg"}},
			{Name: "catchall.test", MX: []string{"mx.catchall.test"}, CatchAll: true},
			{Name: "grey.test", MX: []string{"mx.grey.test"}, Users: []string{"alice"}, Greylist: 20 * time.Second},
			{Name: "full.test", MX: []string{"mx.full.test"}, Users: []string{"alice"}, Full: []string{"max"}},
			{Name: "nullmx.test", DNS: DNSNullMX},
			{Name: "nxdomain.test", DNS: DNSNXDomain},
		},
		Cases: []Case{
			ok("alice@acme.test"), ok("bob@acme.test"),
			bad("nobody@acme.test", "mailbox_not_found"),
			risky("anyone@catchall.test", "catch_all"),
			ok("alice@grey.test"),
			ok("jane.doe@initech.test"), bad("jane.smith@initech.test", "mailbox_not_found"),
			ok("alice@full.test"),
			risky("max@full.test", "mailbox_full"),
			bad("info@nullmx.test", "null_mx"),
			bad("info@nxdomain.test", "no_such_domain"),
			bad("not-an-email", "invalid_syntax"),
		},
	}
}

var words = []string{
	"acorn", "birch", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
	"kestrel", "lumen", "meadow", "nimbus", "orchid", "pioneer", "quartz", "riverside", "summit", "tundra",
	"upland", "vertex", "willow", "xenon", "yarrow", "zephyr",
}

var firstNames = []string{
	"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
	"karl", "laura", "mallory", "nina", "oscar", "peggy", "quinn", "rupert", "sybil", "trent",
	"ursula", "victor", "wendy", "xavier", "yvonne", "zoe",
}

var lastNames = []string{
	"adams", "baker", "clark", "davis", "evans", "fisher", "garcia", "hughes", "irving", "jones",
	"keller", "lopez", "morgan", "nguyen", "owens", "parker", "quincy", "reed", "smith", "turner",
	"underwood", "vance", "walker", "young", "zimmer",
}

// DropsBlocksOptions tunes DropsBlocks; zero fields take the defaults.
type DropsBlocksOptions struct {
	Drops     int  // addresses on drop-after-K hosts; default 80
	Blocked   int  // addresses on the blocking host; default 30
	CatchAll  bool // the blocked domain also accepts everything (its probe is blocked all the same)
	RTT       time.Duration
	Seed      int64
	PerDomain int // addresses per drop domain; default 10
	// Bounce: addresses on an accept-then-bounce host (AddAcceptBounce);
	// default 0, none.
	Bounce int
}

// DropsBlocks is a world of the two behaviours of issue 20's items 1 and 2:
//
//	drop-NNN.test   hosts mx.drop-NNN.test that answer K RCPTs of a session
//	                (K = 1, 2, 3 in turn) and close the connection without a
//	                reply when the next one arrives (Host.DropAfterRcpts K+1);
//	                about 70 % of the addresses exist, the rest are 550 5.1.1.
//	                Truth: the real verdict (a verifier that opens a new session
//	                and sends at most K RCPTs gets every one).
//	blocked.test    mx.blocked.test answers every RCPT "554 5.7.1 Service
//	                unavailable; Client host [ip] blocked using zen.spamhaus.org"
//	                (Host.BlockClient). Truth: unknown/blocked, Knowable (a
//	                blocked address counts as right only when it is unknown).
//	bounce.test     with Bounce > 0: mx.bounce.test accepts every RCPT and
//	                would bounce later (AddAcceptBounce). Case: risky/catch_all
//	                for every address; Spec.Truth tells the real mailboxes.
func DropsBlocks(opts DropsBlocksOptions) Spec {
	if opts.Drops <= 0 {
		opts.Drops = 80
	}
	if opts.Blocked <= 0 {
		opts.Blocked = 30
	}
	if opts.PerDomain <= 0 {
		opts.PerDomain = 10
	}
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x64726f7073)) // "drops"
	s := Spec{RTT: opts.RTT}
	nd := (opts.Drops + opts.PerDomain - 1) / opts.PerDomain
	left := opts.Drops
	for di := range nd {
		name := fmt.Sprintf("drop-%03d.test", di+1)
		h := "mx." + name
		s.Hosts = append(s.Hosts, NewHost(h, DropsAfter(di%3+1)))
		d := Domain{Name: name, MX: []string{h}}
		for i := range min(opts.PerDomain, left) {
			local := fmt.Sprintf("u%02d", i+1)
			email := local + "@" + name
			if rng.Float64() < 0.7 {
				d.Users = append(d.Users, local)
				s.Cases = append(s.Cases, ok(email))
			} else {
				s.Cases = append(s.Cases, bad(email, "mailbox_not_found"))
			}
		}
		left -= opts.PerDomain
		s.Domains = append(s.Domains, d)
	}
	s.Hosts = append(s.Hosts, NewHost("mx.blocked.test", BlocksClient()))
	bd := Domain{Name: "blocked.test", MX: []string{"mx.blocked.test"}, CatchAll: opts.CatchAll}
	for i := range opts.Blocked {
		local := fmt.Sprintf("b%02d", i+1)
		if i%2 == 0 {
			bd.Users = append(bd.Users, local)
		}
		s.Cases = append(s.Cases, BlockedCase(local+"@blocked.test"))
	}
	s.Domains = append(s.Domains, bd)
	if opts.Bounce > 0 {
		s = AddAcceptBounce(s, opts.Bounce, opts.Seed)
	}
	rng.Shuffle(len(s.Cases), func(a, b int) { s.Cases[a], s.Cases[b] = s.Cases[b], s.Cases[a] })
	return s
}

// SharedServersOptions tunes SharedServers; zero fields take the defaults.
type SharedServersOptions struct {
	Tenants   int // tenant domains, each with its own MX name; default 30
	PerTenant int // addresses per tenant; default 10
	Servers   int // shared servers (one address each); default 3
	// Pool is how many servers each tenant's MX name resolves to (in
	// turn from its own); default 1.
	Pool int
	// MaxConnsPerServer is every server's MaxConns; 0: unlimited, so the
	// world counts whatever a client opens (HostStats.MaxConcurrent).
	MaxConnsPerServer int
	// ProviderMaxConns caps the sessions over all the servers together
	// (Spec.ProviderMaxConns of provider SharedProvider); 0: no cap.
	ProviderMaxConns int
	RTT              time.Duration
	Seed             int64
}

// SharedProvider is the Host.Provider of SharedServers' servers, and
// SharedMXSuffix the suffix of all their names (a rules-table entry for it
// makes a verifier treat them as one provider).
const (
	SharedProvider = "sharedmx"
	SharedMXSuffix = "sharedmx.test"
)

// SharedServers is issue 20's "many MX names on shared servers": Tenants
// domains tenant-NN.test, each with its own MX name
// tenant-NN.mail.protection.sharedmx.test, all of them aliases of a few
// servers srvN.sharedmx.test (Host.Provider SharedProvider), as
// "<tenant>.mail.protection.outlook.com" names resolve to a few of
// Microsoft's front ends. Tenant i's name resolves to server i mod Servers
// (and the next Pool-1 servers). Any server accepts RCPTs for every tenant
// (SMTP cannot tell which name the client dialled). About 70 % of the
// addresses exist, the rest are 550 5.1.1; every tenth tenant is catch-all.
// Truth: the real verdicts, every one knowable. The point is politeness:
// a client that caps its sessions per MX name opens up to Tenants times
// its cap on one server; HostStats.MaxConcurrent (per server address) and
// Stats.PerProvider show what the servers saw.
func SharedServers(opts SharedServersOptions) Spec {
	if opts.Tenants <= 0 {
		opts.Tenants = 30
	}
	if opts.PerTenant <= 0 {
		opts.PerTenant = 10
	}
	if opts.Servers <= 0 {
		opts.Servers = 3
	}
	opts.Pool = min(max(opts.Pool, 1), opts.Servers)
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x736861726564)) // "shared"
	s := Spec{RTT: opts.RTT}
	if opts.ProviderMaxConns > 0 {
		s.ProviderMaxConns = map[string]int{SharedProvider: opts.ProviderMaxConns}
	}
	for i := range opts.Servers {
		s.Hosts = append(s.Hosts, Host{Name: fmt.Sprintf("srv%d.%s", i+1, SharedMXSuffix),
			MaxConns: opts.MaxConnsPerServer, Provider: SharedProvider})
	}
	for ti := range opts.Tenants {
		name := fmt.Sprintf("tenant-%02d.test", ti+1)
		mx := fmt.Sprintf("tenant-%02d.mail.protection.%s", ti+1, SharedMXSuffix)
		for p := range opts.Pool {
			h := &s.Hosts[(ti+p)%opts.Servers]
			h.Aliases = append(h.Aliases, mx)
		}
		d := Domain{Name: name, MX: []string{mx}, CatchAll: ti%10 == 9}
		for i := range opts.PerTenant {
			local := fmt.Sprintf("%s.%s%d", firstNames[rng.IntN(len(firstNames))], lastNames[rng.IntN(len(lastNames))], i)
			email := local + "@" + name
			switch {
			case d.CatchAll:
				if rng.Float64() < 0.7 {
					d.Users = append(d.Users, local)
				}
				s.Cases = append(s.Cases, risky(email, "catch_all"))
			case rng.Float64() < 0.7:
				d.Users = append(d.Users, local)
				s.Cases = append(s.Cases, ok(email))
			default:
				s.Cases = append(s.Cases, bad(email, "mailbox_not_found"))
			}
		}
		s.Domains = append(s.Domains, d)
	}
	rng.Shuffle(len(s.Cases), func(a, b int) { s.Cases[a], s.Cases[b] = s.Cases[b], s.Cases[a] })
	return s
}
