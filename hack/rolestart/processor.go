package main

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/serve"
)

// buildProcessor builds what a processor pod of a job of family fam
// builds.
func buildProcessor(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, fam string) (*jobs.Processor, error) {
	_ = fam // every process builds every family
	return serve.NewProcessorWatching(ctx, cfg, rdb, log)
}
