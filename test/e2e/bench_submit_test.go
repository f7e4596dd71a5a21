package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// BenchmarkSubmit100k measures accepting a 100,000-row submission of
// distinct network URLs (decode, classify, dedupe, charge, store), with no
// workers running so only the submission is timed.
func BenchmarkSubmit100k(b *testing.B) {
	env := bulkdtest.Start(b, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.ShardSize, c.RateLimit = 1000, 1_000_000
		c.AccountMaxActiveJobs, c.AccountMaxStoredBytes = 0, 0 // b.N jobs of 100,000 rows, none completed
	}))
	_, key := env.Account(credits.Whole(int64(b.N+1) * 100_000))
	var body bytes.Buffer
	body.WriteString(`{"input":[`)
	for i := 0; i < 100_000; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"network_url":"https://www.linkedin.com/company/generated-company-number-%d"}`, i)
	}
	body.WriteString("]}")
	b.SetBytes(int64(body.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := env.Do(http.MethodPost, "/v1/company-enrichment/bulk", key, body.Bytes())
		if r.Status != 200 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
}
