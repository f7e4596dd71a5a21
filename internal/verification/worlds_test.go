package verification

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/verify"
)

// The set-up the world tests share (accuracy_test: the hostile Go world;
// slow_test: the slow server; mtaworld_test: the real MTAs).

// worldVerifier is a verifier of a test world as `bulkd serve` builds
// it: outbound allowed to loopback only, catch-all probes and the session
// limiter (lim) shared through rdb. cfg has the world's DNS server and
// SMTP port and the test's own settings.
func worldVerifier(tb testing.TB, cfg verify.Config, l *verify.Lists, rdb redis.UniversalClient, lim verify.LimiterOptions) *verify.Verifier {
	tb.Helper()
	cfg.Policy = &outbound.Policy{Allow: outbound.LoopbackPrefixes}
	cfg.Probes = verify.NewRedisProbes(rdb)
	v, err := verify.New(cfg, l, verify.NewRedisLimiter(rdb, lim))
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// A deal splits n addresses into the groups answered at the same time
// (indexes into the addresses).
type deal func(n int) [][]int

// inShards is the engine's one job: shards of at most size addresses in
// order, answered at once as the engine's workers do.
func inShards(size int) deal {
	return func(n int) [][]int {
		var out [][]int
		for off := 0; off < n; off += size {
			var g []int
			for i := off; i < min(off+size, n); i++ {
				g = append(g, i)
			}
			out = append(out, g)
		}
		return out
	}
}

// toJobs deals the addresses to jobs jobs in turn (each one shard, in the
// addresses' order), as that many customers' lists over the same domains.
func toJobs(jobs int) deal {
	return func(n int) [][]int {
		var out [][]int
		for j := range jobs {
			var g []int
			for i := j; i < n; i += jobs {
				g = append(g, i)
			}
			if len(g) > 0 {
				out = append(out, g)
			}
		}
		return out
	}
}

// answerUntilFinal runs the family's Retry as the engine does, each
// attempt's addresses in the groups of split and each attempt after the
// last RetryAt of the one before, until no answer waits for a retry. It
// logs every attempt (label first) and returns the final results, the
// time of the first pass and of the whole.
func answerUntilFinal(ctx context.Context, t *testing.T, label string, fam *Family, emails []string, split deal) (map[string]verify.Result, time.Duration, time.Duration) {
	t.Helper()
	final := make(map[string]verify.Result, len(emails))
	pending := append([]string(nil), emails...)
	start := time.Now()
	var firstPass time.Duration
	for attempt := 1; len(pending) > 0; attempt++ {
		answers := answerAttempt(ctx, t, fam, pending, attempt, split)
		if attempt == 1 {
			firstPass = time.Since(start)
		}
		var again []string
		var due time.Time
		reasons := map[string]int{}
		for i, a := range answers {
			var s stored
			if err := json.Unmarshal(a.Data, &s); err != nil {
				t.Fatal(err)
			}
			if a.RetryAt.IsZero() {
				final[pending[i]] = s.Result
				continue
			}
			reasons[s.Reason]++
			again = append(again, pending[i])
			if a.RetryAt.After(due) {
				due = a.RetryAt
			}
		}
		t.Logf("%s: attempt %d at %v: %d addresses, %d to retry %v", label, attempt, time.Since(start).Round(time.Millisecond),
			len(pending), len(again), reasons)
		pending = again
		if len(pending) > 0 {
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				t.Fatal("out of time waiting for a retry")
			}
		}
	}
	return final, firstPass, time.Since(start)
}

// answerAttempt answers one attempt of pending, the groups of split at
// the same time.
func answerAttempt(ctx context.Context, t *testing.T, fam *Family, pending []string, attempt int, split deal) []jobs.Answer {
	t.Helper()
	answers := make([]jobs.Answer, len(pending))
	groups := split(len(pending))
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for _, idx := range groups {
		emails := make([]string, len(idx))
		attempts := make([]int, len(idx))
		for k, i := range idx {
			emails[k], attempts[k] = pending[i], attempt
		}
		wg.Go(func() {
			a, err := fam.Retry(ctx, emails, attempts)
			if err != nil {
				errs <- fmt.Errorf("attempt %d: %w", attempt, err)
				return
			}
			for k, i := range idx {
				answers[i] = a[k]
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return answers
}
