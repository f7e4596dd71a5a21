package mailworld

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Accept then bounce (issue 20). Some servers (gateways without a
// recipient directory, some filtering front ends) answer every RCPT 250
// and send a bounce later for a mailbox that does not exist. SMTP cannot
// tell such a server's real mailboxes from its unknown ones, and its
// catch-all probe is accepted like everything else, so the only honest
// answer for all of its addresses is what a catch-all gets: risky/catch_all
// (that is each address's Case), never deliverable. Its mailboxes' fate
// (Spec.Truth) is still deliverable or undeliverable: a verifier answering
// deliverable there is a false deliverable for every unknown mailbox.

// AddAcceptBounce adds to s the domain bounce.test on the host
// mx.bounce.test (Host.AcceptThenBounce) with n addresses, about 70 % of
// them existing mailboxes; each address's Case is risky/catch_all.
func AddAcceptBounce(s Spec, n int, seed int64) Spec {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x626f756e6365)) // "bounce"
	s.Hosts = append(s.Hosts, Host{Name: "mx.bounce.test", AcceptThenBounce: true})
	d := Domain{Name: "bounce.test", MX: []string{"mx.bounce.test"}}
	for i := range n {
		local := fmt.Sprintf("m%02d", i+1)
		if rng.Float64() < 0.7 {
			d.Users = append(d.Users, local)
		}
		s.Cases = append(s.Cases, risky(local+"@bounce.test", "catch_all"))
	}
	s.Domains = append(s.Domains, d)
	return s
}

// Truth is the fate of mail to email in the world s, whatever SMTP says at
// RCPT time: Deliverable for an existing mailbox (a user that is neither
// full, disabled nor refusing our sender) or any address of a catch-all
// domain, Undeliverable
// for anything else (an unknown mailbox, also one an AcceptThenBounce host
// accepted; a domain without mail; bad syntax). It is the truth that
// accuracy is judged against where the Case cannot be: a verifier's
// deliverable for an address whose Truth is Undeliverable is a false
// deliverable.
func (s Spec) Truth(email string) string {
	at := strings.LastIndexByte(email, '@')
	if at <= 0 || at == len(email)-1 {
		return Undeliverable
	}
	local, dom := strings.ToLower(email[:at]), canon(email[at+1:])
	for _, d := range s.Domains {
		if canon(d.Name) != dom {
			continue
		}
		if d.DNS != DNSMX && d.DNS != DNSNoMXWithA {
			return Undeliverable
		}
		for _, f := range append(append(append([]string(nil), d.Full...), d.Disabled...), d.SenderBlocked...) {
			if strings.EqualFold(f, local) {
				return Undeliverable
			}
		}
		if d.CatchAll {
			return Deliverable
		}
		for _, u := range d.Users {
			if strings.EqualFold(u, local) {
				return Deliverable
			}
		}
		return Undeliverable
	}
	return Undeliverable
}
