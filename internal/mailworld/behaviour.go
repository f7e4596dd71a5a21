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

// DropsAfter makes a host answer k RCPTs of a session and close the
// connection without a reply when the next one arrives
// (Host.DropAfterRcpts k+1). The truth of its addresses does not change: a
// verifier that sends at most k RCPTs per session gets every answer.
func DropsAfter(k int) Behaviour {
	return func(h *Host) { h.DropAfterRcpts = k + 1 }
}

// BlocksClient makes a host answer every RCPT with a DNSBL block of the
// client (Host.BlockClient): its addresses' truth is unknown/blocked
// (BlockedCase), whatever the mailbox.
func BlocksClient() Behaviour {
	return func(h *Host) { h.BlockClient = true }
}

// Limits caps a host's concurrent sessions (Host.MaxConns; 421 beyond)
// and RCPTs per session (Host.MaxRcpts; 452 beyond); 0 is unlimited.
func Limits(conns, rcpts int) Behaviour {
	return func(h *Host) { h.MaxConns, h.MaxRcpts = conns, rcpts }
}

// Tarpits delays a host's banner and every reply by d (Host.Tarpit).
func Tarpits(d time.Duration) Behaviour {
	return func(h *Host) { h.Tarpit = d }
}

// AcceptsThenBounces makes a host accept every RCPT (Host.AcceptThenBounce):
// risky/catch_all as far as SMTP tells.
func AcceptsThenBounces() Behaviour {
	return func(h *Host) { h.AcceptThenBounce = true }
}

// NoPipelining makes a host leave PIPELINING out of its EHLO reply.
func NoPipelining() Behaviour {
	return func(h *Host) { h.NoPipelining = true }
}

// Refuses makes a host refuse connections (Host.Refuse).
func Refuses() Behaviour {
	return func(h *Host) { h.Refuse = true }
}

// RunBy makes a host one of the provider's (Host.Provider): their
// sessions count together (Spec.ProviderMaxConns).
func RunBy(provider string) Behaviour {
	return func(h *Host) { h.Provider = provider }
}

// NewHost is the host name with the behaviours, as a scenario says it:
// NewHost("mx.blocked.test", BlocksClient()).
func NewHost(name string, bs ...Behaviour) Host {
	h := Host{Name: name}
	Give(&h, bs...)
	return h
}

// Give gives the host h (in place) the behaviours.
func Give(h *Host, bs ...Behaviour) {
	for _, b := range bs {
		b(h)
	}
}

// BlockedCase is the truth of an address on a host that BlocksClient:
// unknown/blocked, knowable (a blocked address is right only when the
// verifier answers it unknown).
func BlockedCase(email string) Case { return Case{email, Unknown, "blocked", true} }

// Apply gives the host named host (its Name, not an alias) the behaviours,
// on a copy of spec.Hosts (the caller's spec is not changed). A name that is
// no host of spec is an error.
func Apply(spec Spec, host string, bs ...Behaviour) (Spec, error) {
	for i := range spec.Hosts {
		if canon(spec.Hosts[i].Name) != canon(host) {
			continue
		}
		spec.Hosts = append([]Host(nil), spec.Hosts...)
		Give(&spec.Hosts[i], bs...)
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
