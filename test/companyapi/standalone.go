package companyapi

import (
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// Standalone runs rows through a standalone bulkd in this process
// (internal/bulkdtest: a private redis-server on loopback, in-process
// workers) with the Companies fixtures and ref's settings that decide the
// results (shard and batch size, rate limit, redirect checks and the proxy
// they go through): what a Kubernetes-mode run must return too.
func Standalone(t testing.TB, ref config.Config, rows []Row) (JobStatus, []map[string]any) {
	t.Helper()
	env := bulkdtest.Start(t, bulkdtest.WithConfig(func(c *config.Config) {
		c.ShardSize, c.BatchSize, c.RateLimit = ref.ShardSize, ref.BatchSize, ref.RateLimit
		c.RedirectChecks, c.HTTPProxy = ref.RedirectChecks, ref.HTTPProxy
	}))
	env.PutCompanies(Companies()...)
	_, key := env.Account(credits.Whole(1_000_000))
	a := Client{T: t, URL: env.URL}
	sub := a.Submit(key, rows)
	st := a.Wait(key, sub.JobID, 120*time.Second)
	return st, a.Results(key, sub.JobID)
}
