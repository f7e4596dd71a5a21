package mailworld

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// HostileOptions tunes Hostile; zero fields take the defaults.
type HostileOptions struct {
	// Ordinary is the number of ordinary domains (about 40 % of them on
	// three shared provider hosts); default 30.
	Ordinary int
	// PerDomain is the number of addresses per domain; default 10.
	PerDomain int
	RTT       time.Duration // default 0
	// Greylist is the greylisting period of the grey- domains; default 1s.
	Greylist time.Duration
	// Slow is the extra delay before every reply of the tarpit- hosts, a
	// tarpit a verifier waits out (it must stay below its command
	// timeout); default 200ms. Stuck is the stuck- host's, one no verifier
	// should wait out (longer than its command timeout); default 3s.
	Slow, Stuck time.Duration
	Seed        int64
}

// Hostile is a world with every hostile behaviour the mail world has, for
// accuracy measurements (issue 20's goals). Each domain's name starts with
// its behaviour (HostileBehaviour reads it back):
//
//	ok-         ordinary domains, own host or one of three shared provider
//	            hosts (3 sessions, 100 RCPTs each; a 4th session is 421);
//	            about 20 % unknown mailboxes, 2 % each full, disabled and
//	            refusing our sender (Domain.SenderBlocked, undeliverable/
//	            rejected), the rest exist
//	shared-     8 tenants whose MX names each resolve to 2 of 3 servers of
//	            one provider (3 sessions per server, 6 over the provider;
//	            421 beyond): the real verdict
//	catch-      catch-all: risky/catch_all
//	grey-       greylisting for Greylist (the real verdict once retried)
//	drop-       a host dropping the session without a reply after K = 1, 2,
//	            3 RCPTs (two domains each; the real verdict)
//	blocked-    three domains on one host answering every RCPT with a DNSBL
//	            block of the client (the third domain also catch-all):
//	            unknown/blocked, knowable (a blocked address is right only
//	            when it is unknown)
//	dropshared- three domains on one shared host (3 sessions) that drops
//	            the session after 2 RCPTs (the real verdict)
//	dropgrey-   drop after K = 1, 2 and greylisting (the real verdict)
//	catchgrey-  catch-all and greylisting: risky/catch_all
//	bounce-     accept then bounce: risky/catch_all (Spec.Truth has the
//	            mailboxes' real fate)
//	tarpit-     every reply Slow late (the real verdict)
//	tight-      1 session at a time (421 beyond) and 5 RCPTs per session
//	            (452 beyond): the real verdict
//	nopipe-     no PIPELINING: the real verdict
//	backup-     the first MX refuses connections, the second answers
//	implicit-   no MX, an A record: the real verdict
//	nullmx-, nx-, nomail-   undeliverable null_mx, no_such_domain,
//	            no_mail_server
//	stuck-      every reply Stuck late: unknown/timeout, not knowable
//	dead-       its only MX refuses connections: unknown/connection_failed,
//	            not knowable
//	servfail-   SERVFAIL: unknown/dns_error, not knowable
//
// Cases are shuffled as a real upload.
func Hostile(opts HostileOptions) Spec {
	opts = opts.withDefaults()
	b := &hostileBuilder{opts: opts, s: Spec{RTT: opts.RTT},
		rng: rand.New(rand.NewPCG(uint64(opts.Seed), 0x686f7374696c65))} // "hostile"
	b.providers = []string{"mx.hostile-provider-a.test", "mx.hostile-provider-b.test", "mx.hostile-provider-c.test"}
	for _, p := range b.providers {
		b.s.Hosts = append(b.s.Hosts, NewHost(p, Limits(3, 100)))
	}
	b.s.Hosts = append(b.s.Hosts, NewHost("mx.blocked.hostile.test", BlocksClient()))
	b.ordinary()
	b.sharedTenants()
	b.hostileDomains()
	b.combined()
	b.serverKinds()
	b.unreachable()
	s := b.s
	b.rng.Shuffle(len(s.Cases), func(a, c int) { s.Cases[a], s.Cases[c] = s.Cases[c], s.Cases[a] })
	return s
}

func (opts HostileOptions) withDefaults() HostileOptions {
	if opts.Ordinary <= 0 {
		opts.Ordinary = 30
	}
	if opts.PerDomain <= 0 {
		opts.PerDomain = 10
	}
	if opts.RTT < 0 {
		opts.RTT = 0
	}
	if opts.Greylist <= 0 {
		opts.Greylist = time.Second
	}
	if opts.Slow <= 0 {
		opts.Slow = 200 * time.Millisecond
	}
	if opts.Stuck <= 0 {
		opts.Stuck = 3 * time.Second
	}
	return opts
}

// hostileBuilder builds Hostile's world, one kind of domain at a time
// (in a fixed order: the draws of rng depend on it).
type hostileBuilder struct {
	opts      HostileOptions
	rng       *rand.Rand
	s         Spec
	n         int
	providers []string
}

// name is the next domain name of kind.
func (b *hostileBuilder) name(kind string) string {
	b.n++
	return fmt.Sprintf("%s-%03d.test", kind, b.n)
}

// ownHost gives d a host of its own, mx.<domain>, with the behaviours.
func (b *hostileBuilder) ownHost(d *Domain, bs ...Behaviour) {
	h := NewHost("mx."+d.Name, bs...)
	b.s.Hosts = append(b.s.Hosts, h)
	d.MX = []string{h.Name}
}

// mix fills a domain that answers every mailbox truthfully.
func (b *hostileBuilder) mix(d *Domain) {
	for _, local := range hostileLocals(b.rng, b.opts.PerDomain) {
		email := local + "@" + d.Name
		switch r := b.rng.Float64(); {
		case r < 0.20:
			b.s.Cases = append(b.s.Cases, bad(email, "mailbox_not_found"))
		case r < 0.22:
			d.Full = append(d.Full, local)
			b.s.Cases = append(b.s.Cases, risky(email, "mailbox_full"))
		case r < 0.24:
			d.Disabled = append(d.Disabled, local)
			b.s.Cases = append(b.s.Cases, bad(email, "mailbox_disabled"))
		case r < 0.26:
			d.SenderBlocked = append(d.SenderBlocked, local)
			b.s.Cases = append(b.s.Cases, bad(email, "rejected"))
		default:
			d.Users = append(d.Users, local)
			b.s.Cases = append(b.s.Cases, ok(email))
		}
	}
}

// same gives every address of d the one expected answer c; the
// mailboxes (for Spec.Truth) are about 70 % of them.
func (b *hostileBuilder) same(d *Domain, c Case) {
	for _, local := range hostileLocals(b.rng, b.opts.PerDomain) {
		if b.rng.Float64() < 0.7 {
			d.Users = append(d.Users, local)
		}
		c.Email = local + "@" + d.Name
		b.s.Cases = append(b.s.Cases, c)
	}
}

func (b *hostileBuilder) add(d Domain) { b.s.Domains = append(b.s.Domains, d) }

// ordinary adds the ok- domains: about 40 % on the provider hosts.
func (b *hostileBuilder) ordinary() {
	for range b.opts.Ordinary {
		d := Domain{Name: b.name("ok")}
		if b.rng.Float64() < 0.4 {
			d.MX = []string{b.providers[b.rng.IntN(len(b.providers))]}
		} else {
			b.ownHost(&d, Limits(3, 100))
		}
		b.mix(&d)
		b.add(d)
	}
}

// sharedTenants adds 8 tenants whose MX names
// (<tenant>.mail.protection.hostile.test) each resolve to 2 of the 3
// servers of one provider (3 sessions per server, 6 over the provider):
// the caps are the servers', whatever name led there.
func (b *hostileBuilder) sharedTenants() {
	s := &b.s
	if s.ProviderMaxConns == nil {
		s.ProviderMaxConns = map[string]int{}
	}
	s.ProviderMaxConns[HostileProvider] = 6
	pool := len(s.Hosts)
	for i := range 3 {
		h := NewHost(fmt.Sprintf("srv%d.hostilecloud.test", i+1), Limits(3, 100))
		h.Provider = HostileProvider
		s.Hosts = append(s.Hosts, h)
	}
	for ti := range 8 {
		d := Domain{Name: b.name("shared")}
		mx := strings.TrimSuffix(d.Name, ".test") + ".mail.protection.hostilecloud.test"
		for p := range 2 {
			h := &s.Hosts[pool+(ti+p)%3]
			h.Aliases = append(h.Aliases, mx)
		}
		d.MX = []string{mx}
		b.mix(&d)
		b.add(d)
	}
}

// hostileDomains adds the catch-, grey-, drop- and blocked- domains.
func (b *hostileBuilder) hostileDomains() {
	for range 3 {
		d := Domain{Name: b.name("catch"), CatchAll: true}
		b.ownHost(&d, Limits(3, 0))
		b.same(&d, risky("", "catch_all"))
		b.add(d)
	}
	for i := range 3 {
		d := Domain{Name: b.name("grey"), Greylist: b.opts.Greylist}
		if i == 0 {
			d.MX = []string{b.providers[0]} // greylisting behind a shared host
		} else {
			b.ownHost(&d, Limits(3, 0))
		}
		b.mix(&d)
		b.add(d)
	}
	for i := range 6 {
		d := Domain{Name: b.name("drop")}
		b.ownHost(&d, DropsAfter(i%3+1)) // K = 1, 2, 3
		b.mix(&d)
		b.add(d)
	}
	for i := range 3 {
		// The third is also catch-all: its probe is blocked all the same.
		d := Domain{Name: b.name("blocked"), MX: []string{"mx.blocked.hostile.test"}, CatchAll: i == 2}
		b.same(&d, BlockedCase(""))
		b.add(d)
	}
}

// combined adds behaviours together: a shared host that drops after 2
// RCPTs for three domains, drop-after-K hosts that greylist, a catch-all
// domain that greylists (its probe too).
func (b *hostileBuilder) combined() {
	b.s.Hosts = append(b.s.Hosts, NewHost("mx.dropshared.hostile.test", DropsAfter(2), Limits(3, 0)))
	for range 3 {
		d := Domain{Name: b.name("dropshared"), MX: []string{"mx.dropshared.hostile.test"}}
		b.mix(&d)
		b.add(d)
	}
	for i := range 2 {
		d := Domain{Name: b.name("dropgrey"), Greylist: b.opts.Greylist}
		b.ownHost(&d, DropsAfter(i+1))
		b.mix(&d)
		b.add(d)
	}
	d := Domain{Name: b.name("catchgrey"), CatchAll: true, Greylist: b.opts.Greylist}
	b.ownHost(&d, Limits(3, 0))
	b.same(&d, risky("", "catch_all"))
	b.add(d)
}

// serverKinds adds the bounce-, tarpit-, tight-, nopipe-, backup- and
// implicit- domains.
func (b *hostileBuilder) serverKinds() {
	{
		d := Domain{Name: b.name("bounce")}
		b.ownHost(&d, AcceptsThenBounces())
		b.same(&d, risky("", "catch_all"))
		b.add(d)
	}
	for range 2 {
		d := Domain{Name: b.name("tarpit")}
		b.ownHost(&d, Tarpits(b.opts.Slow))
		b.mix(&d)
		b.add(d)
	}
	for range 2 {
		d := Domain{Name: b.name("tight")}
		b.ownHost(&d, Limits(1, 5))
		b.mix(&d)
		b.add(d)
	}
	{
		d := Domain{Name: b.name("nopipe")}
		b.ownHost(&d, NoPipelining())
		b.mix(&d)
		b.add(d)
	}
	{
		d := Domain{Name: b.name("backup")}
		b.s.Hosts = append(b.s.Hosts, NewHost("mx1."+d.Name, Refuses()), NewHost("mx2."+d.Name))
		d.MX = []string{"mx1." + d.Name, "mx2." + d.Name}
		b.mix(&d)
		b.add(d)
	}
	d := Domain{Name: b.name("implicit"), DNS: DNSNoMXWithA}
	b.ownHost(&d)
	b.mix(&d)
	b.add(d)
}

// unreachable adds the domains with no answer to find: no mail, stuck,
// dead and SERVFAIL.
func (b *hostileBuilder) unreachable() {
	for _, c := range []struct {
		kind   string
		dns    DNSKind
		reason string
	}{{"nullmx", DNSNullMX, "null_mx"}, {"nx", DNSNXDomain, "no_such_domain"}, {"nomail", DNSNoMail, "no_mail_server"}} {
		d := Domain{Name: b.name(c.kind), DNS: c.dns}
		b.same(&d, bad("", c.reason))
		d.Users = nil
		b.add(d)
	}
	{
		d := Domain{Name: b.name("stuck")}
		b.ownHost(&d, Tarpits(b.opts.Stuck))
		b.same(&d, unknown("", "timeout"))
		b.add(d)
	}
	{
		d := Domain{Name: b.name("dead")}
		b.ownHost(&d, Refuses())
		b.same(&d, unknown("", "connection_failed"))
		b.add(d)
	}
	d := Domain{Name: b.name("servfail"), DNS: DNSServFail}
	b.same(&d, unknown("", "dns_error"))
	d.Users = nil
	b.add(d)
}

// HostileProvider is the Host.Provider of the hostile world's shared
// servers (Spec.ProviderMaxConns caps it at 6).
const HostileProvider = "hostilecloud"

// HostileBehaviour is the behaviour of an address's domain in a Hostile
// world ("ok", "drop", "blocked", ...): the domain name's prefix.
func HostileBehaviour(email string) string {
	dom := email[strings.LastIndexByte(email, '@')+1:]
	if i := strings.IndexByte(dom, '-'); i > 0 {
		return dom[:i]
	}
	return dom
}

// hostileLocals returns n distinct first.last local parts.
func hostileLocals(rng *rand.Rand, n int) []string {
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		local := firstNames[rng.IntN(len(firstNames))] + "." + lastNames[rng.IntN(len(lastNames))]
		if seen[local] {
			local += fmt.Sprint(rng.IntN(100))
		}
		if !seen[local] {
			seen[local] = true
			out = append(out, local)
		}
	}
	return out
}

// PeopleBehaviours are the hostile behaviours HardenPeople gives domains of
// a people world, in turn.
var PeopleBehaviours = []string{"drop1", "drop2", "drop3", "blocked", "bounce", "tarpit", "senderblocked", "tight", "nopipe"}

// HardenPeople gives every other ordinary domain of a people world (one
// that receives mail on a host of its own, is neither catch-all nor
// greylisting) one of PeopleBehaviours in turn, and adjusts the truth of
// its people:
//
//	drop1..3       the host drops the session without a reply after K
//	               RCPTs: the truth is unchanged
//	blocked        every RCPT is a DNSBL block of the client: nobody is
//	               findable (PersonCase.Blocked; the honest answer is
//	               not_found/unknown)
//	bounce         accept then bounce: every RCPT is accepted, so the
//	               domain is catch-all as far as SMTP tells
//	               (PersonCase.CatchAll; a guess, never a verified address)
//	tarpit         every reply slow late (slow must stay below the
//	               finder's command timeout): unchanged
//	senderblocked  the domain's people's own mailboxes refuse our sender
//	               (550 5.7.1 Sender blocked): they are not findable, and
//	               the answer must not be someone else's address
//	tight          1 session at a time, 5 RCPTs per session: unchanged
//	nopipe         no PIPELINING: unchanged
//
// It returns the new spec and cases and each hardened domain's behaviour
// (other domains are absent from the map).
func HardenPeople(s Spec, cases []PersonCase, slow time.Duration) (Spec, []PersonCase, map[string]string) {
	s.Hosts = append([]Host(nil), s.Hosts...)
	s.Domains = append([]Domain(nil), s.Domains...)
	cases = append([]PersonCase(nil), cases...)
	hostIdx := map[string]int{}
	for i, h := range s.Hosts {
		hostIdx[canon(h.Name)] = i
	}
	ordinary := map[string]bool{}
	for _, c := range cases {
		if c.Reason == "" && !c.CatchAll && !c.Greylisted {
			ordinary[canon(c.Domain)] = true
		}
	}
	beh := map[string]string{}
	next := 0
	for di := range s.Domains {
		d := &s.Domains[di]
		name := canon(d.Name)
		hi, own := hostIdx["mx."+name]
		if !ordinary[name] || !own || len(d.MX) != 1 || canon(d.MX[0]) != "mx."+name {
			continue
		}
		next++
		if next%2 == 1 {
			continue // every other one stays ordinary
		}
		b := PeopleBehaviours[(next/2-1)%len(PeopleBehaviours)]
		beh[name] = b
		h := &s.Hosts[hi]
		switch b {
		case "drop1", "drop2", "drop3":
			Give(h, DropsAfter(int(b[4]-'0')))
		case "blocked":
			Give(h, BlocksClient())
		case "bounce":
			Give(h, AcceptsThenBounces())
		case "tarpit":
			Give(h, Tarpits(slow))
		case "tight":
			Give(h, Limits(1, 5))
		case "nopipe":
			Give(h, NoPipelining())
		case "senderblocked":
			for _, c := range cases {
				if canon(c.Domain) == name && c.Email != "" {
					d.SenderBlocked = append(d.SenderBlocked, c.Email[:strings.LastIndexByte(c.Email, '@')])
				}
			}
		}
	}
	for i := range cases {
		c := &cases[i]
		switch beh[canon(c.Domain)] {
		case "blocked":
			c.Findable, c.Blocked = false, true
		case "bounce":
			c.Findable, c.CatchAll = false, true
		case "senderblocked":
			c.Findable = false
		}
	}
	return s, cases, beh
}

// AddColleagues gives every ordinary domain of a people world (mail, not
// catch-all), for up to n people asked about who are not in its directory
// and have a plain ASCII name, a colleague's mailbox at the person's
// {first} form (ronald@ for Ronald McDonald, who left: Ronald Miller's), or
// at the {f}{last} form where the domain writes {first}: the departed
// person's most likely wrong answer. Nobody's truth changes; a finder that
// answers such a mailbox verified answers a wrong person.
func AddColleagues(s Spec, cases []PersonCase, n int) Spec {
	s.Domains = append([]Domain(nil), s.Domains...)
	byName := map[string]int{}
	for i, d := range s.Domains {
		byName[canon(d.Name)] = i
	}
	added := map[string]int{}
	for _, c := range cases {
		dom := canon(c.Domain)
		i, ok := byName[dom]
		if !ok || c.Email != "" || c.Reason != "" || c.CatchAll || added[dom] >= n {
			continue
		}
		f, l := strings.ToLower(strings.TrimSpace(c.FirstName)), strings.ToLower(strings.TrimSpace(c.LastName))
		if !asciiLetters(f) || !asciiLetters(l) {
			continue
		}
		pat := "{first}"
		if c.Pattern == "{first}" {
			pat = "{f}{last}"
		}
		local := RenderPattern(pat, f, l)
		d := &s.Domains[i]
		taken := false
		for _, u := range d.Users {
			if strings.EqualFold(u, local) {
				taken = true
			}
		}
		if taken {
			continue
		}
		d.Users = append(append([]string(nil), d.Users...), local)
		added[dom]++
	}
	return s
}
