package mailworld

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// HardenOptions says how many domains of a world Harden turns hostile.
type HardenOptions struct {
	// DropDomains: domains whose own MX host drops the connection without
	// a reply after K RCPTs of a session (K = 1, 2, 3 in turn;
	// Host.DropAfterRcpts K+1). Their truth does not change: a verifier
	// that sends at most K RCPTs per session gets every answer.
	DropDomains int
	// BlockDomains: domains moved onto one server that answers every RCPT
	// with a DNSBL block of the client (mx.rblguard.test, Host.BlockClient).
	// Their addresses' truth becomes unknown/blocked, knowable.
	BlockDomains int
	// SharedDomains: domains given an MX name of their own,
	// <label>.mail.protection.sharedmx.test, that is an alias of one of
	// SharedServers servers srvN.sharedmx.test (Host.Provider
	// SharedProvider), as Microsoft 365 tenants' names lead to a few front
	// ends; their truth does not change. The servers' MaxConns is
	// SharedMaxConns (0: unlimited, so the world counts what a client opens).
	SharedDomains  int
	SharedServers  int // default 3
	SharedMaxConns int
	Seed           int64
}

// Hostility is what Harden did: the domains it changed, by kind.
type Hostility struct {
	Drops  map[string]int    // domain -> K (RCPTs answered per session)
	Blocks map[string]bool   // domains on the blocking server
	Shared map[string]string // domain -> the shared server its MX name leads to
}

// BlockHost is the name of Harden's blocking server.
const BlockHost = "mx.rblguard.test"

// Harden turns some ordinary domains of spec (and, with SharedDomains,
// moves some behind shared servers) (a domain of DNSMX whose
// only MX host serves no other domain, neither greylisting nor catch-all)
// into issue 20's hostile servers, so a benchmark world (Bench, People) has
// drops and blocks in the proportions the issue measured: a 20,000-address
// world had 800 addresses on drop servers and one server blocking ours.
// The choice is by Seed among the eligible domains (fewer are changed when
// fewer are eligible). Spec.Cases of the blocked domains' addresses become
// unknown/blocked; a caller with its own truth (People's PersonCase) reads
// Hostility. spec is modified in place and returned.
func Harden(spec Spec, opts HardenOptions) (Spec, Hostility) {
	hy := Hostility{Drops: map[string]int{}, Blocks: map[string]bool{}, Shared: map[string]string{}}
	serves := map[string]int{} // host -> domains listing it
	for _, d := range spec.Domains {
		if d.DNS == DNSMX || d.DNS == DNSNoMXWithA {
			for _, m := range d.MX {
				serves[canon(m)]++
			}
		}
	}
	hostIdx := map[string]int{}
	for i, h := range spec.Hosts {
		hostIdx[canon(h.Name)] = i
	}
	var eligible []int
	for i, d := range spec.Domains {
		if d.DNS != DNSMX || len(d.MX) != 1 || d.CatchAll || d.Greylist > 0 || serves[canon(d.MX[0])] != 1 {
			continue
		}
		if _, ok := hostIdx[canon(d.MX[0])]; !ok {
			continue
		}
		eligible = append(eligible, i)
	}
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x686f7374696c65)) // "hostile"
	rng.Shuffle(len(eligible), func(a, b int) { eligible[a], eligible[b] = eligible[b], eligible[a] })
	nd := min(opts.DropDomains, len(eligible))
	drops, rest := eligible[:nd], eligible[nd:]
	blocks, rest := rest[:min(opts.BlockDomains, len(rest))], rest[min(opts.BlockDomains, len(rest)):]
	shared := rest[:min(opts.SharedDomains, len(rest))]
	sort.Ints(drops)
	sort.Ints(shared)
	if len(shared) > 0 {
		if opts.SharedServers <= 0 {
			opts.SharedServers = 3
		}
		first := len(spec.Hosts)
		for i := range opts.SharedServers {
			spec.Hosts = append(spec.Hosts, NewHost(fmt.Sprintf("srv%d.%s", i+1, SharedMXSuffix),
				Limits(opts.SharedMaxConns, 100), RunBy(SharedProvider)))
		}
		for n, i := range shared {
			d := &spec.Domains[i]
			srv := &spec.Hosts[first+n%opts.SharedServers]
			label := strings.ReplaceAll(strings.TrimSuffix(canon(d.Name), ".test"), ".", "-")
			mx := label + ".mail.protection." + SharedMXSuffix
			srv.Aliases = append(srv.Aliases, mx)
			d.MX = []string{mx} // the domain's old host stays (nothing lists it any more)
			hy.Shared[canon(d.Name)] = srv.Name
		}
	}
	for n, i := range drops {
		d := &spec.Domains[i]
		k := n%3 + 1
		Give(&spec.Hosts[hostIdx[canon(d.MX[0])]], DropsAfter(k))
		hy.Drops[canon(d.Name)] = k
	}
	if len(blocks) > 0 {
		spec.Hosts = append(spec.Hosts, NewHost(BlockHost, BlocksClient()))
		for _, i := range blocks {
			d := &spec.Domains[i]
			// The domain's old host stays (nothing lists it any more).
			d.MX = []string{BlockHost}
			hy.Blocks[canon(d.Name)] = true
		}
		for i, c := range spec.Cases {
			at := strings.LastIndexByte(c.Email, '@')
			if at >= 0 && hy.Blocks[canon(c.Email[at+1:])] {
				spec.Cases[i] = BlockedCase(c.Email)
			}
		}
	}
	return spec, hy
}
