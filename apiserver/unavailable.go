package apiserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/redisconn"
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
// TRYAGAIN), the connection broke under the request, or it does not
// answer a PING now (within 500 ms). Only error
// paths pay for the PING.
func (s *Server) redisUnavailable(ctx context.Context, err error) bool {
	// A closed client is this process's own fault (shutting down, or a
	// bug), not Redis being away: that stays a 500.
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	// A broken connection (Redis restarted under the request) counts
	// without the PING: by then the restarted Redis may answer again, so
	// the PING alone would call this a 500 (the soak suite saw four).
	if redisconn.CannotServe(err) || redisconn.ConnLost(err) {
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
