package verify

import "github.com/prometheus/client_golang/prometheus"

// smtpBlocks counts replies that blamed the client (unknown/blocked), by
// the stage of the session that got them: an operator watching it sees an
// egress IP landing on a block list before customers complain.
var smtpBlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_blocks_total",
	Help: "SMTP replies that blamed this client (DNSBL, reputation, ban, missing PTR) rather than the address, by session stage (banner, helo, mail, rcpt); the server is then backed off (30 min by default).",
}, []string{"stage"})

// Collectors are the verifier's Prometheus collectors (process-wide), for
// the registry that serves /metrics.
func Collectors() []prometheus.Collector { return []prometheus.Collector{smtpBlocks, catchAllVerdicts} }

// catchAllVerdicts counts the catch-all verdicts this process used, by
// where they came from: its own probe, or the store shared by every process
// (a probe RCPT saved). A "shared" count near zero with several replicas
// means they are not sharing (see the warning the store logs).
var catchAllVerdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_catchall_verdicts_total",
	Help: "Catch-all verdicts used, by source: probe (this process probed the domain) or shared (read from Redis, judged by any process, no probe sent).",
}, []string{"source"})
