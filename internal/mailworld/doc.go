// Package mailworld is bulkd's own mail world: a small, realistic Internet
// of mail on loopback that the email verifier can be tested and benchmarked
// against without ever leaving the machine.
//
// A World is one authoritative DNS server (UDP and TCP on 127.0.0.1:<free
// port>, built on github.com/miekg/dns) plus one SMTP listener per mail host.
// Every host has its own loopback address (127.1.0.1, 127.1.0.2, ... unless
// the Spec says otherwise; Linux routes all of 127.0.0.0/8 to lo, so no setup
// is needed) and every host listens on the SAME port, so a verifier needs
// exactly two settings to talk to the world: the DNS server's host:port
// (World.DNSAddr) and the SMTP port (World.SMTPPort). It resolves a domain's
// MX hosts through the DNS server, their A records give the 127.x.y.z
// addresses, and it connects to that address on the SMTP port.
//
// # DNS
//
// The DNS server is authoritative (AA set, TTL 300) for every name in the
// Spec. A domain answers according to its DNSKind: MX records (preference
// 10, 20, ... in the order of Domain.MX, with the hosts' A records as
// additional data), a null MX ("MX 0 ."), no MX but an A record (implicit
// MX), a name that exists with only a TXT record, NXDOMAIN, SERVFAIL, or no
// answer at all. Host names have an A record with their IP. AAAA queries get
// an empty NOERROR answer; every other name is NXDOMAIN. Empty answers carry
// an SOA record in the authority section, as real servers do.
//
// # SMTP
//
// The SMTP servers are a small hand-written ESMTP implementation (not
// go-smtp's server) because the world needs exact control of timing:
//
//   - The banner "220 <host> ESMTP mailworld" and every reply are delayed by
//     the world's RTT (changeable at run time with SetRTT) plus the host's
//     Tarpit.
//   - The delay is applied once per read burst: the server sleeps before
//     answering a command only when that command had to be read from the
//     socket; commands that were already buffered (a pipelined group such as
//     MAIL + several RCPTs sent in one write) are answered right away and the
//     replies of the group are flushed together. A pipelined group therefore
//     costs one RTT, like one real network round trip, and a client that
//     waits for each reply pays one RTT per command.
//   - EHLO advertises PIPELINING (unless Host.NoPipelining),
//     ENHANCEDSTATUSCODES, SIZE and 8BITMIME. MAIL and RCPT need EHLO/HELO
//     first; RCPT without MAIL is "503 5.5.1". DATA is accepted when at least
//     one recipient was and the message is discarded. RSET, NOOP, VRFY (252),
//     HELP and QUIT work; anything else is "500 5.5.2".
//   - RCPT answers, in order of precedence: "452 4.5.3 Too many recipients"
//     once the session has seen more than Host.MaxRcpts RCPTs (counted across
//     transactions and RSETs); "550 5.7.1 Relaying denied" when the domain
//     does not list this host as its MX (or implicit MX); "450 4.7.1
//     Greylisted, try again later" while the domain's Greylist period since
//     the first attempt for that exact recipient (remembered world-wide,
//     across hosts) has not passed; "550 5.7.1 <addr>: Sender blocked by
//     the recipient's block list" for Domain.SenderBlocked (one
//     recipient's policy, not a block of the client: undeliverable/
//     rejected); "552 5.2.2 Mailbox full" for Domain.Full; "550 5.2.1 Mailbox disabled" for Domain.Disabled;
//     "250 2.1.5 Ok" for Domain.Users or any local part of a CatchAll
//     domain; otherwise "550 5.1.1 User unknown". Local parts and domains
//     are compared case-insensitively.
//   - Host.MaxConns limits concurrent sessions from all clients: a connection
//     over the limit gets "421 4.7.0 Too many concurrent connections" as its
//     banner and is closed. A session gives its slot back before the server
//     writes "221" to QUIT, so a client that waits for 221 and reconnects at
//     once is never refused; an over-limit connection also waits a few
//     milliseconds for a slot before it is refused, so that a client that
//     simply closed its previous connection is not punished for the time
//     the server takes to notice.
//   - Host.DropAfterRcpts N: when the N-th RCPT of a session arrives, the
//     server flushes the replies it already owes and closes the connection
//     without answering that RCPT (so with N = 1 no RCPT is ever answered).
//     "Drops after K RCPTs" (issue 20) is N = K + 1; Stats counts the drops
//     per host (HostStats.Drops). DropsBlocks is a world of such hosts.
//   - Host.BlockClient: every RCPT is answered with a DNSBL block of the
//     client's IP ("554 5.7.1 Service unavailable; Client host [ip] blocked
//     using zen.spamhaus.org; ...", Postfix's reject_rbl_client wording);
//     the truth of its addresses is unknown/blocked, knowable (HostStats.Blocks).
//     Host.BlockClientIPs blocks only clients connecting from those
//     addresses (a DNSBL lists addresses), so a verifier with several
//     egresses sees one blocked and the others answered. World.Clients
//     tells which addresses greeted each host with which HELO name.
//   - Host.AcceptThenBounce: every RCPT for a domain the host serves is
//     "250 2.1.5 Ok", mailbox or not (full and disabled ones too), as a
//     gateway without a recipient directory answers; mail to a mailbox that
//     does not exist would bounce later (HostStats.Bounces counts those
//     RCPTs). Its catch-all probe is accepted like everything else, so the
//     expected answer (Case) of all its addresses is risky/catch_all, never
//     deliverable; Spec.Truth gives each mailbox's real fate (undeliverable
//     for the unknown ones). AddAcceptBounce adds such a domain to a Spec
//     (DropsBlocksOptions.Bounce).
//   - Host.RcptDelay (the SlowRcpts behaviour): the server takes that long
//     over each RCPT before answering it, as Postfix's `sleep` restriction
//     or a slow policy or LDAP lookup does; since the replies of a
//     pipelined group are flushed only once the whole group is processed
//     (above), a group of n RCPTs gets all its replies at once after n
//     delays, as from Postfix.
//   - Host.Refuse: the host has an A record but nothing listens on its
//     address (the address:port is held by a bound, non-listening socket
//     so no other world can take it), so connections are refused.
//   - Sessions idle for 5 minutes are closed; Close closes everything and
//     waits for every goroutine.
//
// # Behaviours
//
// Every world builder (Classes, Bench, Hostile, Harden, HardenPeople,
// DropsBlocks, People) gives hosts their behaviour with the one set of
// helpers in behaviour.go, so a scenario reads as it is said:
// NewHost("mx.blocked.test", BlocksClient()), NewHost(h, DropsAfter(2)),
// Give(&spec.Hosts[i], Tarpits(d)), Apply(spec, host, SlowRcpts(2s)). The
// Behaviours are DropsAfter(k) (answer k RCPTs a session, then drop),
// BlocksClient, Limits(conns, rcpts), Tarpits(d), SlowRcpts(per),
// AcceptsThenBounces, NoPipelining, Refuses and RunBy(provider);
// BlockedCase is the truth of a blocked address. A new behaviour is a
// Host field (its server side in smtp.go) and one helper there.
//
// Stats counts sessions, 421 refusals, RCPTs, 452 and 450 replies per host
// and the highest number of concurrent sessions (admitted or being refused)
// each host saw, so a benchmark can show that a verifier stayed polite.
//
// # Shared servers
//
// A Host is one server: one address, one listener, one behaviour. Many MX
// names may lead to it (Host.Aliases: more A records for its address), as
// "<tenant>.mail.protection.outlook.com" names lead to a few front ends;
// an alias listed on several hosts resolves to all of them (a pool). SMTP
// cannot tell which name the client dialled, so the server counts every
// session to its address together: HostStats (also keyed by address in
// Stats.PerIP) has the sessions open now (Concurrent) and the most seen
// (MaxConcurrent), which is the politeness "as the server counts it".
// Host.Provider groups hosts of one operator: Stats.PerProvider counts
// their sessions together and Spec.ProviderMaxConns caps them (the banner
// over the cap is the same 421). SharedServers is such a world.
//
// # Scenarios
//
// Classes is one domain per class of mailbox and failure with its expected
// verifier answers (Cases), for accuracy tests; Bench is 200 domains and
// 2,000 addresses with shared provider hosts, connection limits and a
// realistic mix, for the benchmark; SharedServers is many tenants' MX names
// on a few shared servers of one provider; Demo is the small world `make run`
// starts (see hack/mailworld and hack/run-local.sh).
//
// Hostile has every hostile behaviour of the world at once, each domain
// named by its behaviour (HostileBehaviour), for issue 20's accuracy goals;
// HardenPeople and AddColleagues make a People world hostile the same way.
package mailworld
