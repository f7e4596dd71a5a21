package mailworld

import (
	"fmt"
	"strings"
	"time"
)

// A Behaviour is one way a real mail server behaves, given to a Host of any
// world with Apply, so a builder says which hosts behave how instead of
// setting Host fields its own way (issue 29: one set of behaviour helpers
// for every world builder).
type Behaviour func(*Host)

// SlowRcpts makes a host take per over each RCPT and answer a pipelined
// group only once it has processed all of it (Host.RcptDelay), as Postfix
// with a `sleep` restriction does: a group of n RCPTs waits n times per for
// its first reply, then every reply comes at once. The truth of its
// addresses does not change: a verifier that waits gets every answer.
func SlowRcpts(per time.Duration) Behaviour {
	return func(h *Host) { h.RcptDelay = per }
}

// Apply gives the host named host (its Name, not an alias) the behaviours,
// on a copy of spec.Hosts (the caller's spec is not changed). A name that is
// no host of spec is an error.
func Apply(spec Spec, host string, bs ...Behaviour) (Spec, error) {
	for i := range spec.Hosts {
		if canon(spec.Hosts[i].Name) != canon(host) {
			continue
		}
		spec.Hosts = append([]Host(nil), spec.Hosts...)
		for _, b := range bs {
			b(&spec.Hosts[i])
		}
		return spec, nil
	}
	return spec, fmt.Errorf("mailworld: no host %q in the spec", host)
}

// OwnHost returns the domain of spec whose only MX host serves it alone and
// has the most addresses among spec.Cases (ties: the first in spec order),
// and that host's name: the host a behaviour can be given without changing
// any other domain. ok is false when no domain has such a host.
func OwnHost(spec Spec) (domain, host string, ok bool) {
	serves := map[string]int{}
	for _, d := range spec.Domains {
		for _, m := range d.MX {
			serves[canon(m)]++
		}
	}
	hosts := map[string]bool{}
	for _, h := range spec.Hosts {
		hosts[canon(h.Name)] = true
	}
	perDomain := map[string]int{}
	for _, c := range spec.Cases {
		if at := strings.LastIndexByte(c.Email, '@'); at >= 0 {
			perDomain[canon(c.Email[at+1:])]++
		}
	}
	best := -1
	for _, d := range spec.Domains {
		if d.DNS != DNSMX || len(d.MX) != 1 || serves[canon(d.MX[0])] != 1 || !hosts[canon(d.MX[0])] {
			continue
		}
		if n := perDomain[canon(d.Name)]; n > best {
			best, domain, host = n, canon(d.Name), canon(d.MX[0])
		}
	}
	return domain, host, best >= 0
}
