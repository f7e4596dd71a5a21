package apiserver

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the Prometheus collectors of the API, on a registry of their
// own so tests can build as many servers as they like.
type Metrics struct {
	Registry         *prometheus.Registry
	Requests         *prometheus.CounterVec
	Latency          *prometheus.HistogramVec
	RateLimited      prometheus.Counter
	CreditsCharged   prometheus.Counter
	CreditsRefunded  prometheus.Counter
	QuotaConsumed    *prometheus.CounterVec
	AuthFailures     prometheus.Counter
	ChargesByOutcome *prometheus.CounterVec
}

// NewMetrics registers the collectors on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_http_requests_total", Help: "HTTP requests by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bulkd_http_request_duration_seconds", Help: "HTTP request latency by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_rate_limit_rejections_total", Help: "Requests refused with 429 rate_limited.",
		}),
		CreditsCharged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_credits_charged_total", Help: "Credits charged upfront for accepted work.",
		}),
		CreditsRefunded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_credits_refunded_total", Help: "Credits refunded because a submission could not be accepted.",
		}),
		QuotaConsumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_quota_consumed_total", Help: "Quota units consumed, by quota.",
		}, []string{"quota"}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_auth_failures_total", Help: "Requests refused with 401.",
		}),
		ChargesByOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_charges_total", Help: "Charge attempts by outcome (ok, insufficient, refunded).",
		}, []string{"outcome"}),
	}
	m.Registry.MustRegister(m.Requests, m.Latency, m.RateLimited, m.CreditsCharged, m.CreditsRefunded,
		m.QuotaConsumed, m.AuthFailures, m.ChargesByOutcome,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
