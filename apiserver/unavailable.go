package apiserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/apierr"
)

// CodeTemporarilyUnavailable: 503, the service's data store (Redis) could
// not serve the request just now (restarting, loading its append-only file,
// failing over). Nothing was charged (a charge taken before the failure is
// reversed); retry after Retry-After, a charging POST with the same
// Idempotency-Key.
const CodeTemporarilyUnavailable = "temporarily_unavailable"

// unavailableRetryAfter is the Retry-After of that 503, in seconds: a Redis
// restart with its append-only file takes a few seconds.
const unavailableRetryAfter = 1

// redisUnavailable reports whether err happened because Redis cannot serve
// right now: Redis said so (LOADING, READONLY, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN), or it does not answer a PING now (within 500 ms). Only error
// paths pay for the PING.
func (s *Server) redisUnavailable(ctx context.Context, err error) bool {
	// A closed client is this process's own fault (shutting down, or a
	// bug), not Redis being away: that stays a 500.
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	if redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) {
		return true
	}
	// The connection broke under the request (Redis restarted: reset,
	// EOF, refused, a pool with no connection to give). By the time of a
	// PING the restarted Redis may answer again, so the PING alone would
	// call this a 500 (the soak suite saw four).
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	return s.Redis.Ping(pctx).Err() != nil
}

func errTemporarilyUnavailable() *apierr.Error {
	e := apierr.WithCode(http.StatusServiceUnavailable, CodeTemporarilyUnavailable,
		"The service is briefly unavailable. Nothing was charged for this request; retry after the Retry-After seconds.")
	e.RetryAfter = unavailableRetryAfter
	return e
}
