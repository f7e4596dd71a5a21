package apiserver

// Per-account limits (docs/security.md): the answers of a request refused
// at one, and the account's request-rate ceiling.

import (
	"fmt"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
)

// noFitRetryAfter is the Retry-After of a request that cannot fit the
// account's limit however long it waits (a submission larger than the
// whole stored-bytes limit): long enough that a client which honours it
// (bulkctl's --max-retry-after) gives up instead of retrying, since only
// a higher limit can help.
const noFitRetryAfter = 24 * time.Hour

// LimitAPIError is the answer to a request refused at an account limit:
// 429 with the limit's code, a detail naming the limit and what the
// account holds, and Retry-After.
func LimitAPIError(le *accounts.LimitError) *apierr.Error {
	var e *apierr.Error
	switch le.Limit {
	case accounts.LimitActiveJobs:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeActiveJobsLimited, fmt.Sprintf(
			"Account limit active_jobs reached: %d jobs of this account are not completed yet, and the limit is %d. "+
				"Nothing was charged; submit again when one of them completes.", le.Used, le.Max))
	case accounts.LimitStoredBytes:
		if le.Requested > le.Max {
			e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeStoredBytesLimited, fmt.Sprintf(
				"Account limit stored_bytes: this submission alone would keep %d bytes of job data, more than the account's limit of %d. "+
					"Nothing was charged; split it into smaller submissions, or ask for a higher limit.", le.Requested, le.Max))
		} else {
			e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeStoredBytesLimited, fmt.Sprintf(
				"Account limit stored_bytes reached: the account's retained jobs keep %d bytes of job data, this submission needs %d more, "+
					"and the limit is %d. Nothing was charged; older jobs' data is deleted when their retention ends.", le.Used, le.Requested, le.Max))
		}
	case accounts.LimitDrafts:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeDraftsLimited, fmt.Sprintf(
			"Account limit drafts reached: %d uploads of this account are waiting to be submitted, and the limit is %d. "+
				"Submit or let them expire (2 hours after upload) first.", le.Used, le.Max))
	case accounts.LimitDraftBytes:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeDraftsLimited, fmt.Sprintf(
			"Account limit draft_bytes reached: this account's waiting uploads hold %d bytes, this one has %d more, and the limit is %d. "+
				"Submit or let them expire (2 hours after upload) first.", le.Used, le.Requested, le.Max))
	case accounts.LimitKeys:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeKeysLimited, fmt.Sprintf(
			"Account limit keys reached: the account has %d API keys that are not revoked, and the limit is %d. Revoke one first.", le.Used, le.Max))
	default:
		e = apierr.WithCode(http.StatusTooManyRequests, "limit_exceeded", le.Error())
	}
	ra := le.RetryAfter
	if ra <= 0 && le.Limit != accounts.LimitKeys {
		ra = noFitRetryAfter
	}
	if ra > 0 {
		e.RetryAfter = int((ra + time.Second - 1) / time.Second)
	}
	return e
}

// accountRate is p's account's request-rate ceiling (all the account's
// keys together): its override, else the default; 0 for none. It is never
// below one key's own limit: a key must be able to use the rate its
// X-RateLimit-Limit announces (and a test or load run that raises
// --rate-limit raises the ceiling with it).
func (s *Server) accountRate(p *accounts.Principal) int {
	rate := s.Limits.RequestRate
	if v, ok := p.Account.Overrides[accounts.LimitRequestRate]; ok {
		rate = v
	}
	if rate <= 0 {
		return 0
	}
	return int(min(max(rate, int64(s.Limiter.PerSecond())), 1<<30))
}
