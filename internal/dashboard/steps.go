package dashboard

// The new-job steps that hold a whole upload in memory (the upload
// itself, and the mapping, review and confirm steps that load the draft
// from Redis and read it row by row) are bounded in number: one at a
// time per account, a few at a time per process. The rows and the API
// body built from a draft are weighed by the API's own decoding admission
// (apiserver.QuoteAs, SubmitAs); the draft's text, up to MaxUploadBytes,
// is what this bounds. Without it one user opening the review of one
// large draft in 8 tabs held 8 copies of it besides the decoding: 381 MiB
// peak RSS against the API pod's 256 MiB request (issue 26, item 1;
// TestEightReviewsOfTheLargestDraftStayInTheRequest).

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

const (
	// stepsPerAccount is how many draft steps of one account run at once:
	// one person works through one upload at a time, and a second tab
	// waits for the first.
	stepsPerAccount = 1
	// stepsPerProcess is how many run at once in the process, whatever
	// the accounts: 4 uploads of 16 MiB are 64 MiB of text.
	stepsPerProcess = 4
	// stepWait is how long a step waits for its turn before the page
	// says to retry: the API's admission wait.
	stepWait = 2 * time.Second
	// stepRetryAfter is the Retry-After of a step turned away, seconds.
	stepRetryAfter = 2
)

// stepLimiter counts the draft steps running, per account and in all.
type stepLimiter struct {
	mu       sync.Mutex
	total    int
	accounts map[string]int
	changed  chan struct{}
	perAcct  int
	perProc  int
	wait     time.Duration
}

func newStepLimiter() *stepLimiter {
	return &stepLimiter{accounts: map[string]int{}, changed: make(chan struct{}), perAcct: stepsPerAccount, perProc: stepsPerProcess, wait: stepWait}
}

// acquire takes a place for account, waiting up to l.wait; it returns the
// release, or accountFull (its own other steps) / processFull.
func (l *stepLimiter) acquire(ctx context.Context, account string) (release func(), accountFull bool, ok bool) {
	var timer *time.Timer
	for {
		l.mu.Lock()
		acctBusy := l.accounts[account] >= l.perAcct
		if !acctBusy && l.total < l.perProc {
			l.accounts[account]++
			l.total++
			l.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { l.release(account) }) }, false, true
		}
		ch := l.changed
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(l.wait)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil, acctBusy, false
		case <-ctx.Done():
			return nil, acctBusy, false
		}
	}
}

func (l *stepLimiter) release(account string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.accounts[account]--; l.accounts[account] <= 0 {
		delete(l.accounts, account)
	}
	l.total--
	close(l.changed)
	l.changed = make(chan struct{})
}

// isDraftStep: the routes that hold an upload or a draft whole.
func isDraftStep(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == Base+"/jobs/new":
		return r.Method == http.MethodPost // the upload; GET is the empty form
	case len(p) > len(Base+"/jobs/new/") && p[:len(Base+"/jobs/new/")] == Base+"/jobs/new/":
		return true
	}
	return false
}

// stepTurn takes the request's place among the draft steps, or answers a
// page saying to retry (429 when the account's own other step holds it,
// 503 when the process is busy with others'), with Retry-After.
func (d *Dashboard) stepTurn(w http.ResponseWriter, r *http.Request, account string) (func(), bool) {
	release, mine, ok := d.steps.acquire(r.Context(), account)
	if ok {
		return release, true
	}
	w.Header().Set("Retry-After", strconv.Itoa(stepRetryAfter))
	if mine {
		d.errorPage(w, r, http.StatusTooManyRequests, "One upload at a time",
			"Another upload of this account is being read or submitted right now (in another tab?). Try again in a few seconds.")
	} else {
		d.errorPage(w, r, http.StatusServiceUnavailable, "Busy",
			"The dashboard is reading other uploads right now. Try again in a few seconds.")
	}
	return nil, false
}
