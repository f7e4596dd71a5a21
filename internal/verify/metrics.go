package verify

import "github.com/prometheus/client_golang/prometheus"

// smtpBlocks counts replies that blamed the client (unknown/blocked), by
// the stage of the session that got them and the egress: an operator
// watching it sees an egress IP landing on a block list before customers
// complain.
var smtpBlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_blocks_total",
	Help: "SMTP replies that blamed this client (DNSBL, reputation, ban, missing PTR) rather than the address, by session stage (banner, helo, mail, rcpt) and egress; the server is then backed off for that egress (30 min by default) and the other egresses used.",
}, []string{"stage", "egress"})

// smtpProxyFailures counts failures of an egress's SOCKS5 proxy (counted
// with the warning, at most once a minute per egress).
var smtpProxyFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_proxy_failures_total",
	Help: "Failures of an SMTP egress's SOCKS5 proxy (unreachable, credentials refused, protocol error), counted at most once a minute per egress; the other egresses are used meanwhile.",
}, []string{"egress"})

// Collectors are the verifier's Prometheus collectors (process-wide), for
// the registry that serves /metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{smtpBlocks, smtpProxyFailures, catchAllVerdicts, smtpReplies, smtpThrottlePauses, slowServers}
}

// smtpReplies counts the replies the verifier read, by stage and class
// (rcptClass.String): an operator tells a server's rate limit (throttling)
// from a block of the egress (block) and from refusals of addresses
// (address, policy) without reading reply texts.
var smtpReplies = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_replies_total",
	Help: "SMTP replies read, by stage (banner, helo, mail, rcpt) and class: accepted, address (mailbox unknown, disabled or full), policy (a refusal of the address for policy), recipient_limit (too many recipients in one session), throttling (the server says we send too much: paused briefly), greylisting, block (our egress refused: backed off 30 min), closing (421 without throttling words), temporary.",
}, []string{"stage", "class"})

// smtpThrottlePauses counts the pauses started after a throttling reply.
var smtpThrottlePauses = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_throttle_pauses_total",
	Help: "Pauses of a mail server after it answered with throttling (too many connections or recipients from us, rate limit), by session stage and egress; a pause lasts 5 s, doubling with each one that follows the last (at most 2 min), and the addresses are asked again after it.",
}, []string{"stage", "egress"})

// catchAllVerdicts counts the catch-all verdicts this process used, by
// where they came from: its own probe, or the store shared by every process
// (a probe RCPT saved). A "shared" count near zero with several replicas
// means they are not sharing (see the warning the store logs).
var catchAllVerdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_catchall_verdicts_total",
	Help: "Catch-all verdicts used, by source: probe (this process probed the domain) or shared (read from Redis, judged by any process, no probe sent).",
}, []string{"source"})
