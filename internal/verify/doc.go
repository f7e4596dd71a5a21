// Package verify is bulkd's e-mail verifier: it tells whether an address
// can receive mail by asking the address's own mail servers over SMTP, the
// way a sending MTA would, and stops before DATA (no message is ever sent).
// It is a library with no HTTP in it: the bulk job engine calls Verify with
// batches of up to about 1,000 addresses, the single-address endpoint calls
// VerifyOne with a deadline (SPEC 2.8, 4.4, 4.6).
//
// # Results
//
// Every input gets one Result, in input order. Status and reason:
//
//	status         reason             when
//	deliverable    accepted           RCPT 250 on a domain proven not to accept everything
//	undeliverable  invalid_syntax     Normalize rejects the address
//	               no_such_domain     NXDOMAIN for the domain
//	               null_mx            RFC 7505 null MX ("MX 0 .")
//	               no_mail_server     no MX and no A/AAAA, or no MX host has an address, or none the
//	                                  outbound policy allows (Config.Policy; also a literal it refuses)
//	               mailbox_not_found  x.1.1 / x.1.6, or 550 whose text says the user is unknown
//	               mailbox_disabled   x.2.1, or text saying disabled/inactive/suspended
//	               rejected           any other permanent 5xx to RCPT (policy, relaying, ...)
//	risky          catch_all          accepted, but the domain accepts any local part
//	               mailbox_full       x.2.2 or 552 (4xx ones are also Temporary)
//	               disposable         accepted on a disposable domain (takes precedence over catch_all)
//	unknown        greylisted         450/451 with 4.7.x or greylisting text (Temporary)
//	               dns_error          SERVFAIL, REFUSED or timeout after one retry
//	               connection_failed  every MX refused, unreachable, 554 banner, or not dialable
//	               timeout            a reply did not come within its wait (tarpit), or ctx ended first (Temporary)
//	               temporary_failure  any other 4xx (Temporary)
//	               rate_limited       421 and no other MX to try (Temporary, RetryAfter = back-off)
//	               smtp_error         protocol error, connection dropped twice before any RCPT of the
//	                                  session was answered (or 5 times in all), MAIL FROM refused
//	               blocked            the reply blames the client, not the address (isClientBlock: a
//	                                  DNSBL; at RCPT otherwise only a reply naming our source IP,
//	                                  HELO name or "client host" with block words or x.7.x; before
//	                                  RCPT reputation, ban, no PTR alone too); Temporary,
//	                                  RetryAfter = BlockBackoff (30m), the host backed off as long
//
// Unknown means unknown: nothing is deliverable without a 250 to the real
// address in a transaction whose catch-all probe was definitively refused
// (5xx), or on a domain whose refusal is cached (CatchAllTTL). The probe is
// "bulkd-probe-" plus 12 random base32 characters at the domain, sent as the
// FIRST recipient of the transaction. Probe accepted: the domain is
// catch-all and accepted addresses are risky/catch_all (a 5.1.1 for a real
// address is still undeliverable). Probe answered 4xx: accepted addresses
// are unknown (greylisted or temporary_failure), never deliverable. A
// domain keeps its probe address for a day, because greylisting keys on the
// recipient: a new random probe would be greylisted on every retry.
//
// Verdicts and probe addresses are shared by every process through Redis
// (Config.CatchAlls; RedisProbes in production): bulkd:smtp:catchall:<domain>
// holds "1" (the probe was accepted: catch-all) or "0" (refused with a 5xx)
// for CatchAllTTL (1h), bulkd:smtp:probe:<domain> the probe local part for a
// day (set once). A Verify call reads what its domains have, in one
// pipelined round trip per 512 domains while their DNS resolves, and a
// domain with a verdict gets no probe; a new verdict is written in the
// background as soon as the probe's reply is read. A probe answered 4xx
// (greylisting, a temporary failure) or blocked is no verdict: nothing is
// written and the next call, in any process, probes again. In front of
// Redis each process keeps what it read or wrote for at most a minute (and
// never past the Redis TTL), at most 100,000 domains. Each key is one
// domain's, so the store works on Redis Cluster as is. If Redis fails (or
// takes longer than 500 ms) the call probes as it would without the store,
// and the store is left alone for 10 s (one warning per outage).
// bulkd_smtp_catchall_verdicts_total{source} counts the verdicts used by
// where they came from: "probe" (this process probed) or "shared" (read
// from Redis: a probe RCPT saved).
//
// Temporary marks answers that may change on a later attempt: greylisted,
// temporary_failure, rate_limited, a 4xx mailbox_full, and addresses left
// unanswered because ctx ended (reported timeout), and a tarpit's timeout
// (a slow server may have been taken for one: slow.go); a dead host's
// connection_failed is final (not Temporary). RetryAfter is
// the server's hint when its reply has one ("try again in 60 seconds"),
// else 5 minutes for greylisting, the back-off for rate_limited, 1 hour for
// a full mailbox, 15 minutes otherwise. With Config.GreylistRetry set,
// Verify itself waits that long and asks a greylisted address once more
// (when ctx's deadline leaves room); it is 0 by default because real
// greylisting periods are minutes long and the job engine retries later.
//
// Role addresses stay deliverable with is_role true and a lower score.
// smtp_code is the reply code of the last RCPT TO for the address (or of
// the MAIL/421 that ended it), 0 when no SMTP conversation reached it.
//
// # Scores (0..100)
//
//	accepted                   95, minus 10 for a role address, minus 5 for a free provider
//	catch_all                  50 (role 40)
//	mailbox_full               30
//	greylisted                 30
//	temporary_failure          25
//	rate_limited               25
//	blocked                    25
//	disposable                 20
//	smtp_error                 20
//	timeout                    15
//	connection_failed          10
//	dns_error                  10
//	any undeliverable reason    0
//
// # Syntax and normalization (Normalize; the dedupe key of the bulk family)
//
//   - Surrounding white space (and zero-width space/BOM) is trimmed; the
//     rest must be valid UTF-8 without control characters.
//   - Local part: a dot-atom of RFC 5322 atext (no leading, trailing or
//     consecutive dots), lowercased; or a quoted string (qtext and quoted
//     pairs of printable ASCII), kept byte for byte. Non-ASCII (RFC 6531)
//     local parts are rejected: almost no MX host accepts them and we could
//     not prove them either way. At most 64 octets.
//   - Domain: converted with IDNA (UTS #46 lookup mapping, golang.org/x/net/idna)
//     to lowercase A-labels, then it must be a host name: LDH labels of 1..63
//     octets without leading/trailing hyphens, at least two labels, a
//     top-level label starting with a letter, at most 253 octets, no
//     trailing dot. Names that IDNA would change again are rejected, so
//     Normalize is idempotent.
//   - Address literals: [IPv4] and [IPv6:addr], written back canonically
//     ("[IPv6:2001:db8::1]"). They are verified by connecting to that IP
//     directly (no DNS), on SMTPPort, with the same transaction and probe
//     (the probe's domain is the literal). Provider is null for them.
//   - The whole address is at most 254 octets.
//
// # DNS (github.com/miekg/dns against Config.DNSServer)
//
//   - MX records by preference. Ties are ordered by a hash of the host name
//     with a per-process seed: stable within a process (domains sharing an
//     MX set share its sessions) but spread across processes, as RFC 5321
//     5.1 asks for load spreading.
//   - A null MX ("."; alone, or all MX targets ".") is null_mx. NOERROR
//     without MX falls back to the domain's own A, then AAAA (implicit MX);
//     neither is no_mail_server. NXDOMAIN is no_such_domain. SERVFAIL,
//     REFUSED or a timeout is retried once, then dns_error.
//   - MX hosts are resolved to A records, AAAA only when there is no A; at
//     most 2 addresses of a host are dialled.
//   - CNAME chains are followed (at most 8). UDP with EDNS0 (1232 octets),
//     TCP when the answer is truncated.
//   - Answers are cached for their TTL clamped to 30 s..1 h, negative
//     answers 5 minutes, failures not at all; at most 100,000 entries.
//     Concurrent lookups of one question share one query (singleflight).
//
// # SMTP
//
// A small client of our own on net (go-smtp's client sends one command at
// a time, so it cannot pipeline, and its timeouts are per connection). Per
// session: dial (DialTimeout) an MX address on SMTPPort; read the banner;
// EHLO HeloName (HELO when EHLO gets a 5xx); then transactions, one per
// domain (the probe is per domain): [RSET] MAIL FROM:<MailFrom>, RCPT probe,
// RCPT each address. When the server offers PIPELINING (RFC 2920) all the
// transactions the session will send, and QUIT when nothing is left, go in
// ONE write and their replies are read in order, so a session costs three
// round trips (banner, EHLO, the group) whatever it checks. QUIT joins the
// group only when its RCPTs are within what the host is known to take (its
// learned limit, or a session of the call answered in full); otherwise it
// follows once the replies are read, so a one-slot host cannot hand its
// slot to our next session before this one learned its limit from 452s.
// Every reply is bounded by CommandTimeout and the whole session by
// SessionTimeout.
//
// Addresses are grouped by their domain's first MX host: all addresses of
// any domains whose primary MX is the same host share sessions, up to
// MaxRcptsPerSession RCPTs each (probes included). Sessions start once the
// call's DNS lookups are done (or 150 ms in, if some are slow), so domains
// sharing a host are queued together. A host gets as many concurrent
// sessions as its queue needs at MaxRcptsPerSession each, at most the
// per-server cap (the rules table's, else the limiter's), and the
// limiter holds the cap per server address whatever name led to it; all
// hosts are checked concurrently, at most MaxSessions sessions in the
// process.
//
// A session whose call has nothing more for its host, with RCPT budget
// left, is not ended but parked for SessionIdle (2 s) with its politeness
// slot, and the next call that needs its server (the job engine's next
// batch, the finder's next round; any MX name leading to that server
// address through the same egress) goes on with it after an RSET (pool.go).
// The server sees no more sessions than the cap, and fewer new ones.
//
// Replies are sorted into classes (classifyAt, rcptClass.String: address,
// policy, recipient_limit, throttling, greylisting, block, closing,
// temporary; docs/egress.md "Reply classes"): block-list words first, then
// throttling words (isThrottle), then the client-block rules
// (isClientBlock), then RFC 3463 enhanced status code (x.1.1, x.1.6 not
// found; x.2.1 disabled; x.2.2 full; x.5.3 too many recipients; X.3.x and
// 4.4.x the system's; 4.7.x on 450/451 greylisted), then the basic code (452
// too many recipients per RFC 5321 4.5.3.1.10 unless the text says full or
// system storage; 552 full unless the text says otherwise; 421 closing),
// then the text as a last resort ("user unknown", "mailbox full",
// "greylist", ...). testdata/replies.tsv is 564 real replies with their
// class and source (TestReplyCorpus). Every reply read is counted in
// bulkd_smtp_replies_total{stage,class}.
//
// Failures:
//   - refused, unreachable, closed before the banner, or a 554 banner: the
//     next MX host; when none is left, connection_failed (or the best reason
//     among the hosts: rate_limited > timeout > connection_failed >
//     smtp_error > dns_error > no_mail_server).
//   - throttling (any stage; "too many connections from <us>", "too many
//     recipients from <us>", "rate limit", a 421 saying "try again
//     later"; isThrottle): the server address is paused for ThrottlePause
//     (5 s), doubling with each throttling reply after a pause ended up to
//     ThrottlePauseMax (2 min), reset by a session answered without
//     throttling; through the limiter (Throttler), for every process. The
//     unanswered addresses go back to the host's queue and its sessions
//     wait for the pause when the call's deadline leaves room (at most
//     maxThrottles pauses per address, and per host for refusals before
//     any transaction); else rate_limited with the pause as RetryAfter.
//     Never blocked (throttle.go).
//   - 421 without throttling words (banner, EHLO or any command): the server
//     address is backed off for RateLimitBackoff (30 s) through the limiter,
//     for every process, and the unanswered addresses move to the next MX,
//     else rate_limited. When
//     the 421 (or "too many connections") refuses a new session while
//     sessions of ours to the server's address are open (by any MX name,
//     in any call or process: the limiter's count), it is read as the
//     server's concurrency limit instead: its session cap is lowered to
//     what was open, for every name of it and as the limiter slot's cap of
//     every call (remembered for an hour), and the queue is left to the
//     open sessions, without back-off.
//   - 452 / x.5.3 too many recipients: not a verdict; the rest go to a new
//     session, and the server's RCPTs-per-session limit is learned (for an
//     hour) so later sessions stay within it. An address refused so as the
//     first RCPT of two sessions is temporary_failure.
//   - a reply that does not come within its wait (CommandTimeout, plus
//     RcptWait for each RCPT of a pipelined group still to answer): a group
//     of more than 2 RCPTs is a slow server's (smaller groups, a new
//     session; slow.go); otherwise the host is a tarpit: the transaction's
//     addresses and everything queued on the host are timeout (Temporary:
//     the retry pass asks again), with no other MX tried.
//   - the connection dropped mid-session (or a malformed reply, or RSET not
//     250): the unanswered addresses go to a new session. After K answered
//     RCPTs the call's later sessions to the host send at most K; K becomes
//     the host's learned limit (an hour, shared through the limiter) only
//     when a session started after that drop drops after the same K (in
//     this process), so one spurious drop, or a restart dropping every
//     open session at once, does not shrink every session to the host. A drop before any answer
//     counts against the address: twice is smtp_error (5 lost sessions at
//     most per address).
//   - ctx ends: every read and write is cut at once; what is unanswered is
//     timeout, Temporary.
//
// # Politeness across processes (HostLimiter): keyed by server address
//
// Mail servers count a client's connections by the client's address
// against their own address, and a provider (Microsoft, Google, ...) over
// all its addresses; many MX names lead to one server
// ("<tenant>.mail.protection.outlook.com" for every Microsoft 365 tenant).
// So politeness is counted per server ADDRESS and per provider, never per
// MX name. Every key is built by one function, limitKey(egress, server),
// with server "ip:<address>" or "provider:<name>" and egress the name of
// the egress the session goes through ("default" without --smtp-egress):
//
//	what                                   keyed by
//	open sessions (cap), new sessions/s    egress + server address dialled
//	open sessions over a provider (cap)    egress + provider (rules table)
//	throttling pause (ThrottlePause..Max)  egress + server address: the server counts us per address
//	421 back-off (RateLimitBackoff)        egress + server address: one front end's answer
//	block back-off (BlockBackoff)          egress + server address, and egress + provider
//	                                       when known: a provider judges our address the
//	                                       same on all its servers
//	session cap learned from a 421         egress + server address
//	RCPTs per session learned (452, drop)  provider when known, else server address; any
//	                                       egress: it is the server's policy, not about us
//
// Every session first resolves its MX host, then acquires a slot for the
// address it will dial (SlotLimiter): at most the rule's sessions (else
// SessionsPerHost, 3) sessions open to that address across every process
// sharing the limiter, new sessions at most SessionsPerSecond (5) per
// address (GCRA, burst = the cap), none while the address or its provider
// is backed off, and, when the rules table names the provider with
// provider_sessions, at most that many over all the provider's addresses.
// A host's sessions start at its addresses in turn (at most 2 are used), so
// a name with several servers spreads over them; an address that has its
// cap of the call's sessions is skipped, and one that cannot be dialled
// gives its slot back before the next address gets its own. Work is queued per MX
// name, but a session with RCPTs to spare also carries the queued work of
// the call's other MX names that lead to the same server address and
// whose rule is the same (SMTP cannot tell which name led to a server, so
// it answers the same): 30 tenants' names on one server with a cap of 3
// take about as many sessions as their addresses need, not one or more per
// name. Each address still reports its own domain's MX name as mx_host. A
// name no rule matches has no provider: its server's own cap holds.
//
// RedisLimiter is one Lua script per operation on Redis's clock, the keys
// of one limiter key in one cluster slot (hash tag of its SHA-1); a session
// with a provider runs the provider's script (back-off, cap) then the
// server's (back-off, cap, rate), giving the provider's slot back when the
// server says wait. A holder's leases (LeaseTTL, 2 min) are renewed while
// its session lives, so a crashed process's slots free themselves. Waiters
// sleep the returned time (jittered, at most 1 s per sleep) and never spin.
// If Redis is down the limiter keeps limiting in process. 3 sessions and 5
// new sessions per second per address are below what mail hosts answer 421
// to (Postfix's defaults allow 50 concurrent connections per client; hosted
// providers far more), and 3 is the benchmark world's cap.
//
// # Rules by MX name suffix (package rules)
//
// A table matched by the longest suffix of the MX host name gives the
// provider, the reply timeout (instead of CommandTimeout), sessions per
// server address, sessions per provider, RCPTs per session (at most
// MaxRcptsPerSession) and whether the catch-all probe is needed. The
// defaults are compiled in (rules/defaults.go: Google, Microsoft, Yahoo,
// Apple, Proofpoint, Mimecast, Broadcom, Barracuda, GoDaddy, Zoho, Yandex,
// Mail.ru, GMX, Proton); `bulkd admin smtp-rules set|unset|load|reset`
// stores an operator's rules in Redis (bulkd:smtp:rules) over them and
// `smtp-rules list` prints the table in effect. Every process reads the
// table at start and again every 10 s while it verifies (a change needs no
// restart); a call uses the table in effect when it began. probe=no (the
// defaults use it only for consumer Gmail and Outlook.com, which refuse
// unknown recipients at RCPT and have no catch-all) trusts a 250 without a
// probe; everything else is probed.
//
// # Egresses (Config.Egresses, package egress, docs/egress.md)
//
// A session goes through one egress: the host's route, a source address or
// a SOCKS5 proxy, each greeting with its own HELO name. Its keys are
// serverOf(egress name, address, rule): the cap, the rate, back-offs and
// blocks hold per egress and server address (and provider), since a server
// counts clients by address; the RCPTs per session learned are the
// server's, for any egress. The call's own count of sessions per server
// address is kept per address and egress too. A new session takes the
// usable egress with the fewest of the call's sessions to that host, below
// the caps, skipping an egress whose every address of the host has its cap
// of the call's sessions through it; the session then starts at the
// host's next address that egress can reach (a source address reaches
// only its own family). A block (or a 421 back-off) through one egress
// sets that egress aside for the host (setAside) and the others carry its
// queue; only when every egress is set aside is the host down, with the
// most informative reason (blocked before rate_limited) and the soonest
// back-off as RetryAfter. A session carrying another MX name's work on a
// shared server only borrows from names that have not set its egress
// aside. A failing proxy, or an egress that reaches none of the host's
// addresses, sets its egress aside for the host in the call. A proxy is
// asked to CONNECT to the checked address literal only.
//
// # The outbound policy (Config.Policy, internal/outbound)
//
// Sessions reach public addresses only, plus the ranges the operator
// allowed (--outbound-allow-cidrs; test worlds on loopback allow
// 127.0.0.0/8). Every address of an MX host is checked once it is resolved:
// one that is not allowed (loopback, private, link-local, CGNAT,
// unique-local, multicast, reserved, an IPv4-compatible or -mapped form of
// those) refuses the whole host, which then counts as a host without an
// address (no_mail_server; the next MX host is tried). An address literal
// the policy refuses (user@[127.0.0.1]) is answered before any session. So
// an address whose mail servers are all inside ends
// undeliverable/no_mail_server at once: no connection, no wait beyond the
// DNS answers, the same answer whatever listens there. Sessions dial the
// checked addresses (never a name), through a dialer whose Control refuses
// anything else.
//
// # Lists (package lists)
//
// Disposable domains (a listed domain and its subdomains), role local parts
// (the whole local part, ignoring a +tag), free-provider domains (exact).
// The embedded lists (151,669 disposable domains, 5,368 free providers,
// 1,020 role local parts) are bulkd's curated lists merged with maintained
// packages by hack/listmerge; internal/verify/lists/SOURCES.md names each
// package, version, licence and count, and docs/lists.md the merge rules
// (a free provider is never disposable). An operator replaces or extends
// any of them with `bulkd admin lists sync --list KIND [--mode replace|add]
// FILE`, which stores the list in Redis (bulkd:{lists}:<kind>, one slot with
// its metadata and version) and announces it on bulkd:lists:changed;
// LoadListsFromRedis overlays the stored lists on the defaults at start and
// WatchLists reloads them in every running process on the announcement, or
// within 30 s if it was missed.
//
// Suggestion: for a domain that is not a free provider, a top-level typo that is not a real
// TLD is fixed (.con .cmo .ocm ... -> .com, .nte -> .net), and a domain
// within Damerau-Levenshtein (OSA) distance 1 of a well-known provider of 4
// or 5 letters (gmail, yahoo) or 2 of a longer one (hotmail, outlook) is
// corrected to it; providers of 3 letters or fewer (aol, gmx) only through
// TLD fixes, because their one-letter neighbours are real companies. The
// suggestion is the local part at the corrected domain.
//
// Provider: google, microsoft, yahoo, apple, proton, zoho, yandex, mailru,
// gmx, proofpoint, mimecast, broadcom, barracuda, godaddy or tencent when
// the registrable domain of the MX host that answered (or was tried last)
// belongs to them; otherwise that registrable domain (public suffix list);
// null when no MX host was reached or tried.
package verify
