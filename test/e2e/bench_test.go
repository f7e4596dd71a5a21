package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// BenchmarkResultsPage measures one 500-row results page of a completed
// 10,000-row job whose companies carry realistic generated data, served
// from the row cache (the default) and rendered from Redis (cache off).
func BenchmarkResultsPage(b *testing.B) {
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"cache", 256 << 20}, {"live", 0}} {
		b.Run(c.name, func(b *testing.B) { benchmarkResultsPage(b, c.bytes) })
	}
}

func benchmarkResultsPage(b *testing.B, cacheBytes int64) {
	env := bulkdtest.Start(b, bulkdtest.WithConfig(func(c *config.Config) {
		c.ShardSize, c.RateLimit, c.ResultsCacheBytes = 1000, 1_000_000, cacheBytes
	}))
	var data bytes.Buffer
	if err := company.Generate(&data, 10_000, 3, "linkedin.com"); err != nil {
		b.Fatal(err)
	}
	if _, err := company.Import(context.Background(), &data, company.FormatJSONL, env.Parts.Companies, env.Parts.Normalize, nil); err != nil {
		b.Fatal(err)
	}
	_, key := env.Account(credits.Whole(100_000))
	var body bytes.Buffer
	body.WriteString(`{"input":[`)
	for i := 0; i < 10_000; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"domain":"%s"}`, domainOf(b, env, i))
	}
	body.WriteString("]}")
	r := env.Do(http.MethodPost, "/v1/company-enrichment/bulk", key, body.Bytes())
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(b, &sub)
	if r.Status != 200 {
		b.Fatalf("submit: %d %s", r.Status, r.Body[:min(len(r.Body), 300)])
	}
	env.WaitFor("/v1/company-enrichment/bulk/"+sub.JobID, key, 60*time.Second)
	url := env.URL + "/v1/company-enrichment/bulk/" + sub.JobID + "/results?limit=500&offset="
	hc := &http.Client{}
	b.ResetTimer()
	var n int64
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprint(url, (i*733)%9500), nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		m, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("page: %d", res.StatusCode)
		}
		n += m
	}
	b.ReportMetric(float64(n)/float64(b.N), "bytes/page")
}

var domains []string

func domainOf(tb testing.TB, env *bulkdtest.Env, i int) string {
	if domains == nil {
		var data bytes.Buffer
		_ = company.Generate(&data, 10_000, 3, "linkedin.com")
		dec := jsonLines(data.Bytes())
		for _, rec := range dec {
			if rec.Domain != nil {
				domains = append(domains, *rec.Domain)
			}
		}
	}
	return domains[i%len(domains)]
}
