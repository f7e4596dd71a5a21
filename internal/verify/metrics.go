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
	return []prometheus.Collector{smtpBlocks, smtpProxyFailures, catchAllVerdicts, slowServers}
}

// catchAllVerdicts counts the catch-all verdicts this process used, by
// where they came from: its own probe, or the store shared by every process
// (a probe RCPT saved). A "shared" count near zero with several replicas
// means they are not sharing (see the warning the store logs).
var catchAllVerdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_catchall_verdicts_total",
	Help: "Catch-all verdicts used, by source: probe (this process probed the domain) or shared (read from Redis, judged by any process, no probe sent).",
}, []string{"source"})
