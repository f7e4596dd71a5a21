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
func Collectors() []prometheus.Collector { return []prometheus.Collector{smtpBlocks} }
