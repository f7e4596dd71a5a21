package apiserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkd/bulkd/internal/rowcache"
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
	AuthFailures     prometheus.Counter
	ChargesByOutcome *prometheus.CounterVec
	// Admission control (admission.go).
	AdmissionBytes           prometheus.Gauge
	AdmissionMax             prometheus.Gauge
	AdmissionRejected        prometheus.Counter
	AdmissionAccountMax      prometheus.Gauge
	AdmissionAccountRejected prometheus.Counter
	SlowBodies               prometheus.Counter
}

// NewMetrics registers the collectors on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_http_requests_total", Help: "HTTP requests by route pattern (\"unmatched\" when no route took it), method (OTHER when not a standard one) and status.",
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
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_auth_failures_total", Help: "Requests refused with 401.",
		}),
		ChargesByOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_charges_total", Help: "Charge attempts by outcome: ok, insufficient, quota, limit (refused at an account limit before any charge), failed (the submission failed; any charge taken was reversed).",
		}, []string{"outcome"}),
		AdmissionBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkd_admission_bytes", Help: "Bytes of request bodies received and being decoded now, weighed as they arrive.",
		}),
		AdmissionMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkd_admission_max_bytes", Help: "The bound on bulkd_admission_bytes (--max-decoding-bytes).",
		}),
		AdmissionRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_admission_rejections_total", Help: "Requests answered 503 server_busy because their body did not fit under --max-decoding-bytes in time.",
		}),
		AdmissionAccountMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bulkd_admission_account_max_bytes", Help: "One account's share of --max-decoding-bytes (--max-decoding-bytes-per-account).",
		}),
		AdmissionAccountRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_admission_account_rejections_total", Help: "Requests answered 429 account_busy because their account's other bodies took its whole share of --max-decoding-bytes.",
		}),
		SlowBodies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_slow_bodies_total", Help: "Requests answered 408 and closed because their body arrived slower than --body-min-rate after --body-grace.",
		}),
	}
	m.Registry.MustRegister(m.Requests, m.Latency, m.RateLimited, m.CreditsCharged, m.AuthFailures, m.ChargesByOutcome,
		m.AdmissionBytes, m.AdmissionMax, m.AdmissionRejected, m.AdmissionAccountMax, m.AdmissionAccountRejected, m.SlowBodies,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// rowCacheCollector exports the results row cache's counters.
type rowCacheCollector struct{ c *rowcache.Cache }

var (
	rowCacheBytes     = prometheus.NewDesc("bulkd_results_cache_bytes", "Memory held by rendered results rows of completed jobs.", nil, nil)
	rowCacheMax       = prometheus.NewDesc("bulkd_results_cache_max_bytes", "The results cache's bound (--results-cache-bytes).", nil, nil)
	rowCacheChunks    = prometheus.NewDesc("bulkd_results_cache_chunks", "Row chunks (500 rows each) held by the results cache.", nil, nil)
	rowCacheHits      = prometheus.NewDesc("bulkd_results_cache_hits_total", "Row-chunk reads served from the results cache.", nil, nil)
	rowCacheMisses    = prometheus.NewDesc("bulkd_results_cache_misses_total", "Row chunks read from Redis and rendered into the results cache.", nil, nil)
	rowCacheEvictions = prometheus.NewDesc("bulkd_results_cache_evictions_total", "Row chunks evicted to keep the results cache in its bound.", nil, nil)
)

func (r rowCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rowCacheBytes, rowCacheMax, rowCacheChunks, rowCacheHits, rowCacheMisses, rowCacheEvictions} {
		ch <- d
	}
}

func (r rowCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := r.c.Stats()
	ch <- prometheus.MustNewConstMetric(rowCacheBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(rowCacheMax, prometheus.GaugeValue, float64(s.MaxBytes))
	ch <- prometheus.MustNewConstMetric(rowCacheChunks, prometheus.GaugeValue, float64(s.Chunks))
	ch <- prometheus.MustNewConstMetric(rowCacheHits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(rowCacheMisses, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(rowCacheEvictions, prometheus.CounterValue, float64(s.Evictions))
}
