package main

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/serve"
)

// benchJob is the job a measured processor pod is started for: its
// metadata names the family and nothing else (the pod reads no more
// before it builds).
const benchJob = "00000000-0000-4000-8000-0000000000b1"

// buildProcessor builds what `bulkd processor --job` builds for a job of
// family fam: the job's family alone.
func buildProcessor(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, fam string) (*jobs.Processor, error) {
	if err := rdb.HSet(ctx, "bulkd:job:{"+benchJob+"}", "id", benchJob, "family", fam).Err(); err != nil {
		return nil, err
	}
	defer rdb.Del(context.WithoutCancel(ctx), "bulkd:job:{"+benchJob+"}")
	return serve.NewJobProcessor(ctx, cfg, rdb, log, benchJob)
}
