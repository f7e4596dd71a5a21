package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bulkd/bulkd/internal/redisconn"
)

// Redis going away (a restart, a failover, an AOF being loaded) is not a
// fault of the work in hand: a shard must not use up its attempts, and
// have its rows answered as errors, because Redis was restarting; answers
// already computed must not be thrown away because the write that records
// them failed. What follows lets the processor and the in-process executor
// tell "Redis is away" from "this work failed", and wait for Redis.

// StoreWait bounds how long a processor that holds answers waits for Redis
// to come back before it gives the batch up (the shard is then retried as
// a whole, by its executor).
const StoreWait = 2 * time.Minute

// storeBackoff is the first and the longest pause between two checks of a
// Redis that does not answer.
const (
	storeBackoffMin = 50 * time.Millisecond
	storeBackoffMax = 2 * time.Second
)

// Ping checks that Redis answers, within timeout.
func (s *Store) Ping(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// unavailable reports whether err happened because Redis is away: Redis
// said it cannot serve, or it does not answer a PING now. An error of the
// work itself (an answerer's upstream, a malformed job) with Redis up is
// not. ctx ending is not either.
func (s *Store) unavailable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrJobNotFound) {
		return false
	}
	if redisconn.CannotServe(err) {
		return true
	}
	return s.Ping(ctx, 2*time.Second) != nil
}

// awaitRedis waits until Redis answers a PING and can serve, checking with
// a doubling pause, for at most limit (0: until ctx ends). It logs when
// it starts waiting and when Redis is back.
func (s *Store) awaitRedis(ctx context.Context, limit time.Duration, log *slog.Logger, what string) error {
	start := time.Now()
	pause := storeBackoffMin
	warned := false
	for {
		err := s.Ping(ctx, 2*time.Second)
		if err == nil {
			if warned {
				log.Info("redis is back", "waited_for", what, "after", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if !warned {
			log.Warn("redis unavailable; waiting for it", "waiting", what, "err", err)
			warned = true
		}
		if limit > 0 && time.Since(start)+pause > limit {
			return fmt.Errorf("redis unavailable for %v: %w", time.Since(start).Round(time.Second), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, storeBackoffMax)
	}
}

// withStore runs write, an idempotent write of answers in hand; while it
// fails because Redis is away, it waits for Redis (at most StoreWait in
// all) and writes again, so a Redis restart costs a pause, not the work.
func (p *Processor) withStore(ctx context.Context, what string, write func() error) error {
	deadline := time.Now().Add(StoreWait)
	for {
		err := write()
		if err == nil || !p.Store.unavailable(ctx, err) {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		if werr := p.Store.awaitRedis(ctx, left, p.Log, what); werr != nil {
			return errors.Join(err, werr)
		}
	}
}
