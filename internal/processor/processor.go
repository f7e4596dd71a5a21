// Package processor is `bulkd processor`, the process of a shard Job's
// pod (and of a retry Job's): it answers one shard of a job from Redis,
// and says by its exit status whether the Job should retry it. The
// commands that run it are cmd/bulkd and the toy family's
// test/fourthfamily/cmd/bulkd-phone.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

// ShardOwner is the lease owner of a processor pod: one name per shard, so
// the retry of a killed pod takes the shard back at once instead of
// waiting for the dead pod's lease to expire. Two live pods of one shard
// (the Job controller avoids that) would only duplicate work: answers are
// recorded once.
func ShardOwner(jobID string, shard int) string { return fmt.Sprintf("pod/%s/%d", jobID, shard) }

// RunShard is `bulkd processor`: it answers every unanswered input of one
// shard within timeout. While another holder's lease is live it waits for
// it (a crashed holder's lease expires). log carries the job and shard.
func RunShard(ctx context.Context, proc *jobs.Processor, jobID string, shard int, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	for {
		err := proc.ProcessShard(ctx, jobID, shard)
		if err == nil {
			log.Info("shard done", "elapsed", time.Since(start).String())
			return nil
		}
		if !errors.Is(err, jobs.ErrShardBusy) {
			if ctx.Err() != nil && !errors.Is(err, jobs.ErrJobNotFound) {
				return fmt.Errorf("shard %d of %s: %w (timeout %s)", shard, jobID, err, timeout)
			}
			return fmt.Errorf("shard %d of %s: %w", shard, jobID, err)
		}
		log.Info("shard leased by another processor; waiting")
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d of %s: still leased elsewhere: %w", shard, jobID, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// ExitCode is `bulkd processor`'s exit status for RunShard's error: 0 on
// success, v1alpha1.ProcessorExitJobDataMissing when the job's data is
// gone (the index fails at once), v1alpha1.ProcessorExitRetry otherwise
// (the Job retries the index).
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, jobs.ErrJobNotFound):
		return v1alpha1.ProcessorExitJobDataMissing
	default:
		return v1alpha1.ProcessorExitRetry
	}
}
