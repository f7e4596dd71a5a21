package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

type metrics map[string]*dto.MetricFamily

func (b *bench) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape the controller: %w", err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the controller's metrics: %w", err)
	}
	return metrics(mf), nil
}

// series is one metric's value(s), keyed by its labels.
type series struct {
	count   float64
	buckets []bucket // cumulative
	value   float64
}

type bucket struct{ le, n float64 }

type delta map[string]map[string]*series // family -> label string -> series

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// minus is what the counters and histograms gained since before.
func (m metrics) minus(before metrics) delta {
	d := delta{}
	for name, mf := range m {
		d[name] = map[string]*series{}
		old := map[string]*dto.Metric{}
		if bf := before[name]; bf != nil {
			for _, x := range bf.GetMetric() {
				old[labelKey(x)] = x
			}
		}
		for _, x := range mf.GetMetric() {
			k := labelKey(x)
			s := &series{}
			o := old[k]
			switch {
			case x.Histogram != nil:
				s.count = float64(x.Histogram.GetSampleCount())
				if o != nil && o.Histogram != nil {
					s.count -= float64(o.Histogram.GetSampleCount())
				}
				for i, bk := range x.Histogram.GetBucket() {
					n := float64(bk.GetCumulativeCount())
					if o != nil && o.Histogram != nil && i < len(o.Histogram.GetBucket()) {
						n -= float64(o.Histogram.GetBucket()[i].GetCumulativeCount())
					}
					s.buckets = append(s.buckets, bucket{bk.GetUpperBound(), n})
				}
			case x.Counter != nil:
				s.value = x.Counter.GetValue()
				if o != nil && o.Counter != nil {
					s.value -= o.Counter.GetValue()
				}
			}
			d[name][k] = s
		}
	}
	return d
}

// quantiles are p50 and p99 of a histogram's series whose label is value
// (interpolated within a bucket, as Prometheus' histogram_quantile), and
// its count.
func (d delta) quantiles(name, label, value string) (p50, p99, count float64) {
	var agg []bucket
	for k, s := range d[name] {
		if !slices.Contains(strings.Split(k, ","), label+"="+value) {
			continue
		}
		count += s.count
		if agg == nil {
			agg = slices.Clone(s.buckets)
			continue
		}
		for i := range agg {
			if i < len(s.buckets) {
				agg[i].n += s.buckets[i].n
			}
		}
	}
	q := func(q float64) float64 {
		if count == 0 {
			return 0
		}
		rank := q * count
		prevLe, prevN := 0.0, 0.0
		for _, bk := range agg {
			if bk.n >= rank {
				if bk.n == prevN {
					return bk.le
				}
				return prevLe + (bk.le-prevLe)*(rank-prevN)/(bk.n-prevN)
			}
			prevLe, prevN = bk.le, bk.n
		}
		// Beyond the last finite bucket: its bound, a lower bound of the
		// quantile (+Inf would not go into the JSON).
		return prevLe
	}
	return q(0.5), q(0.99), count
}

// shareAbove is the share of a histogram's observations (series whose
// label is value) above le, which must be one of its bucket bounds (0
// when none is).
func (d delta) shareAbove(name, label, value string, le float64) float64 {
	var total, below float64
	for k, s := range d[name] {
		if !slices.Contains(strings.Split(k, ","), label+"="+value) {
			continue
		}
		total += s.count
		for _, bk := range s.buckets {
			if math.Abs(bk.le-le) <= le*1e-9 { // the bounds are products of floats
				below += bk.n
			}
		}
	}
	if total == 0 {
		return 0
	}
	return (total - below) / total
}

// counterBy sums a counter's series by one label.
func (d delta) counterBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	for k, s := range d[name] {
		v := "?"
		for _, kv := range strings.Split(k, ",") {
			if n, val, ok := strings.Cut(kv, "="); ok && n == label {
				v = val
			}
		}
		out[v] += s.value
	}
	return out
}
