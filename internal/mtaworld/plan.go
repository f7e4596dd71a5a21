package mtaworld

import (
	"fmt"
	"math/rand/v2"
)

// serverPlan is one server of the world: its software, the settings its
// postmaster chose (Postfix main.cf lines, or Exim ACL/options), and its
// domains with their address counts at Scale 1.
type serverPlan struct {
	name, software, settings string
	connLimit                int
	domains                  map[string]int // domain -> addresses at Scale 1
	catchAll, blocked, slow  bool
}

// plans is the world. The settings are the ones the issue lists; every
// server also has Postfix's or Exim's defaults for everything else
// (Postfix: smtpd_soft_error_limit 10, smtpd_hard_error_limit 20,
// smtpd_error_sleep_time 1s, smtpd_client_connection_count_limit 50;
// Exim: smtp_accept_max 20). The addresses on one server are spread over
// several domains where the limit is per client, so the verifier's
// per-domain batches meet it together as they would in a real list.
var plans = []serverPlan{
	{name: "postfix-plain", software: "postfix",
		settings: "smtpd_recipient_limit = 10",
		domains:  map[string]int{"plain1.test": 20, "plain2.test": 20}},
	{name: "postfix-anvil", software: "postfix", connLimit: 1,
		settings: "smtpd_client_connection_count_limit = 1\nsmtpd_client_connection_rate_limit = 6\nanvil_rate_time_unit = 20s",
		domains:  map[string]int{"anvil1.test": 12, "anvil2.test": 12, "anvil3.test": 12}},
	{name: "postfix-rcptrate", software: "postfix",
		settings: "smtpd_client_recipient_rate_limit = 15\nanvil_rate_time_unit = 10s",
		domains:  map[string]int{"rate1.test": 15, "rate2.test": 15}},
	{name: "postfix-slow", software: "postfix", slow: true,
		settings: "smtpd_recipient_restrictions = sleep 2, reject_unlisted_recipient, reject_unauth_destination",
		domains:  map[string]int{"slow1.test": 12}},
	{name: "postfix-greylist", software: "postfix",
		settings: "smtpd_recipient_restrictions = reject_unauth_destination, check_policy_service inet:POSTGREY",
		domains:  map[string]int{"grey1.test": 15, "grey2.test": 15}},
	{name: "postfix-dnsbl", software: "postfix", blocked: true,
		settings: "smtpd_client_restrictions = reject_rbl_client bl.mtaworld.test",
		domains:  map[string]int{"listed1.test": 10}},
	{name: "postfix-catchall", software: "postfix", catchAll: true,
		settings: "virtual_alias_maps = texthash:ALIASES (@catchall1.test -> one mailbox)",
		domains:  map[string]int{"catchall1.test": 10}},
	{name: "postfix-nopipelining", software: "postfix",
		settings: "smtpd_discard_ehlo_keywords = pipelining",
		domains:  map[string]int{"nopipe1.test": 15}},
	{name: "exim-ratelimit", software: "exim", connLimit: 2,
		settings: "smtp_accept_max_per_host = 2; acl_smtp_rcpt: defer ratelimit = 12 / 10s / per_rcpt; require verify = recipient",
		domains:  map[string]int{"exim1.test": 15, "exim2.test": 15}},
	{name: "exim-conn", software: "exim", connLimit: 1,
		settings: "smtp_accept_max_per_host = 1; recipients_max = 10; acl_smtp_rcpt: require verify = recipient",
		domains:  map[string]int{"exim3.test": 15, "exim4.test": 10}},
}

// plan lays out the servers on base.x addresses and draws the addresses:
// about two thirds of each domain's local parts exist.
func (w *World) plan(base string) {
	rng := rand.New(rand.NewPCG(w.opts.Seed, 25))
	for i, p := range plans {
		if p.slow && w.opts.NoSlow {
			continue
		}
		s := &Server{Name: p.name, Software: p.software, IP: fmt.Sprintf("%s.%d", base, 11+i),
			Host: fmt.Sprintf("mx%d.mtaworld.test", i+1), Settings: p.settings, ConnLimit: p.connLimit}
		for _, d := range sortedKeys(boolKeys(p.domains)) {
			s.Domains = append(s.Domains, d)
			for j := range p.domains[d] * w.opts.Scale {
				c := Case{Email: fmt.Sprintf("user%03d@%s", j, d), Server: s.Name}
				switch {
				case p.blocked:
					c.Truth = Blocked
				case p.catchAll:
					c.Truth = CatchAll
				case rng.IntN(3) < 2:
					c.Truth = Deliverable
				default:
					c.Truth = Undeliverable
				}
				w.cases = append(w.cases, c)
			}
		}
		w.servers = append(w.servers, s)
	}
}

func boolKeys(m map[string]int) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// mailboxes are the existing addresses of a server's domains.
func (w *World) mailboxes(s *Server) []string {
	var out []string
	for _, c := range w.cases {
		if c.Server == s.Name && c.Truth == Deliverable {
			out = append(out, c.Email)
		}
	}
	return out
}

func planOf(name string) serverPlan {
	for _, p := range plans {
		if p.name == name {
			return p
		}
	}
	return serverPlan{}
}
