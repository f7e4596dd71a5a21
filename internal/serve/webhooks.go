package serve

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/webhook"
)

// webhookPolicy is the policy webhook targets must pass, at submission and
// at delivery: the shared outbound policy (--outbound-allow-cidrs) plus the
// webhook-only allowances, names resolved with --dns-server like every
// outbound lookup.
func webhookPolicy(cfg config.Config) *webhook.Policy {
	allow, _ := cfg.WebhookAllowPrefixes() // validated with the config
	out, _ := outboundConfig(cfg)
	return &webhook.Policy{AllowLoopback: cfg.WebhookAllowLoopback, Allow: allow, Outbound: out.Policy(),
		Resolver: out.Resolver()}
}

// outboundConfig is the outbound configuration of every connection made on
// a customer's behalf: resolver, SMTP port, proxy and the policy's
// allowance, from the flags.
func outboundConfig(cfg config.Config) (outbound.Config, error) {
	allow, err := cfg.OutboundAllowPrefixes()
	if err != nil {
		return outbound.Config{}, err
	}
	out := outbound.Config{DNSServer: cfg.DNSServer, SMTPPort: cfg.SMTPPort, HTTPProxy: cfg.HTTPProxy, Allow: allow}.WithDefaults()
	return out, out.Validate()
}

// NewController builds what `bulkd controller` runs beside its manager, on
// the families as declared (names, metering, error answers and how their
// jobs are shown; no answerer, no SMTP verifier, no address list, no HELO
// check): the shard processor (it answers a failed shard's inputs as the
// family's error outcome, and answers nothing else) and the webhook
// sweeper and deliverer, with their metrics on reg.
func NewController(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, reg prometheus.Registerer, extra ...Extra) (*jobs.Processor, *webhook.Service, error) {
	fams, err := buildFamilies(cfg, rdb, log, scope{declared: true}, extra)
	if err != nil {
		return nil, nil, err
	}
	return newProcessor(cfg, rdb, billing.New(rdb, nil), fams.registry, log), newWebhooks(cfg, rdb, log, fams, webhookPolicy(cfg), reg), nil
}

// newWebhooks builds the webhook service: events of the families as their
// bulk endpoints are mounted (the links), delivery as configured.
func newWebhooks(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, fams *families, pol *webhook.Policy, reg prometheus.Registerer) *webhook.Service {
	ev := &webhook.Events{PublicURL: cfg.PublicURL}
	for _, b := range fams.bulk {
		ev.Mounts = append(ev.Mounts, webhook.Mount{Family: b.Family, Path: "/v1" + b.Path, Unlimited: b.Keys == apiserver.UnlimitedPlan})
	}
	return webhook.New(rdb, webhook.Config{Policy: pol, Events: ev, Registry: reg, Log: log,
		Options: webhook.Options{Timeout: cfg.WebhookTimeout, MaxAge: cfg.WebhookMaxAge, Backoff: cfg.WebhookBackoff,
			MaxBackoff: cfg.WebhookBackoffMax, Owner: cfg.InstanceID}})
}
