package verify

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pacedSMTP is a loopback mail server for h.test with the two limits of
// issue 25 that the verifier used to misread: a connection count limit
// (Postfix anvil's "421 4.7.0 ... too many connections from <client>"
// beyond maxConns open) and, when defer is set, a recipient rate whose
// deferral has no throttling or greylisting words (Exim's default `defer
// ratelimit`: "451 Temporary local problem - please try later"). Each RCPT
// takes rcptDelay, so sessions overlap. Local parts starting with "no" and
// the catch-all probe are unknown users.
type pacedSMTP struct {
	port      int
	maxConns  int
	rcptDelay time.Duration
	// deferRcpt says whether this RCPT is deferred (nil: never).
	deferRcpt func() bool

	open, refused, mostOpen atomic.Int64
}

func startPacedSMTP(t *testing.T, s *pacedSMTP) *pacedSMTP {
	t.Helper()
	s.port = listenSMTP(t, s.serve)
	return s
}

func (s *pacedSMTP) serve(c net.Conn) {
	defer c.Close()
	sessionDeadline(c, 20*time.Second)
	client, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	w := bufio.NewWriter(c)
	n := s.open.Add(1)
	defer s.open.Add(-1)
	// A session the client has just ended (QUIT answered, connection
	// closed) is counted out only when its handler returns; on a loaded
	// machine that can lag the client's next connection. Give such a
	// session a moment to be counted out, as a server's own connection
	// count settles, before refusing: a session still open (they last
	// seconds here) is refused all the same.
	for wait := time.Now().Add(300 * time.Millisecond); s.maxConns > 0 && n > int64(s.maxConns) && time.Now().Before(wait); n = s.open.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	if s.maxConns > 0 && n > int64(s.maxConns) {
		s.refused.Add(1)
		w.WriteString("421 4.7.0 mx.h.test Error: too many connections from " + client + "\r\n")
		w.Flush()
		return
	}
	for {
		m := s.mostOpen.Load()
		if n <= m || s.mostOpen.CompareAndSwap(m, n) {
			break
		}
	}
	w.WriteString("220 mx.h.test ESMTP\r\n")
	w.Flush()
	postfixDialogue(c, w, func() string {
		time.Sleep(s.rcptDelay)
		if s.deferRcpt != nil && s.deferRcpt() {
			return "451 Temporary local problem - please try later"
		}
		return ""
	})
}

// TestConnLimitTwoCalls: two calls at once (two jobs) to a server that
// allows one connection from us. The second call's session is refused
// while the first call's is open: that teaches the server's cap (1) for
// every call of the process, so the second call waits for the slot
// instead of pausing 200 ms and being refused again while the first
// session (about 2 s long) is still open. Every answer is exact.
func TestConnLimitTwoCalls(t *testing.T) {
	srv := startPacedSMTP(t, &pacedSMTP{maxConns: 1, rcptDelay: 100 * time.Millisecond})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, NewLocalLimiter(LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}), &logs)
	a, wantA := throttleCases(10)
	b, wantB := throttleCases(20)
	b = b[10:]
	var wg sync.WaitGroup
	var resA, resB []Result
	wg.Add(2)
	go func() { defer wg.Done(); resA = v.Verify(context.Background(), a) }()
	go func() {
		defer wg.Done()
		// The first call's session is open (not a fixed sleep: on a
		// loaded machine it may take longer to open).
		for deadline := time.Now().Add(10 * time.Second); srv.open.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		resB = v.Verify(context.Background(), b)
	}()
	wg.Wait()
	checkRight(t, resA, wantA)
	checkRight(t, resB, wantB)
	if got := srv.refused.Load(); got > 1 {
		t.Errorf("%d sessions refused as too many connections, want at most the one that teaches the cap", got)
	}
	if got := srv.mostOpen.Load(); got > 1 {
		t.Errorf("%d sessions open at once, the server allows 1", got)
	}
	if !strings.Contains(logs.String(), "its session cap is learned") {
		t.Errorf("no log line for the learned cap: %s", logs.String())
	}
}

// TestVagueDeferralAfterAnswersThrottles: a server whose recipient rate
// limit defers with a bare "451 Temporary local problem - please try
// later" (Exim's default `defer ratelimit`) once 4 RCPTs passed in its
// window. The deferral comes after other RCPTs of the session were
// answered: it is the server's rate limit, not greylisting, so the
// server is paused and the rest asked again within the call: every answer
// exact, none greylisted.
func TestVagueDeferralAfterAnswersThrottles(t *testing.T) {
	const perWindow, window = 4, 300 * time.Millisecond
	var mu sync.Mutex
	var windowStart time.Time
	count := 0
	srv := startPacedSMTP(t, &pacedSMTP{deferRcpt: func() bool {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(windowStart) > window {
			windowStart, count = now, 0
		}
		count++
		return count > perWindow
	}})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, NewLocalLimiter(LimiterOptions{}), &logs)
	emails, want := throttleCases(12)
	res := v.Verify(context.Background(), emails)
	checkRight(t, res, want)
	if !strings.Contains(logs.String(), `"stage":"rcpt"`) {
		t.Errorf("no throttling pause at RCPT logged: %s", logs.String())
	}
}

// TestVagueDeferralFirstIsGreylisting: the same bare deferral from the
// first RCPT of a session on, with nothing decided before, is what a
// greylister sends for a new triplet: the addresses stay greylisted, for
// the retry schedule, and the server is not paused.
func TestVagueDeferralFirstIsGreylisting(t *testing.T) {
	srv := startPacedSMTP(t, &pacedSMTP{deferRcpt: func() bool { return true }})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, NewLocalLimiter(LimiterOptions{}), &logs)
	res := v.Verify(context.Background(), []string{"yes1@h.test", "yes2@h.test", "no1@h.test"})
	for _, r := range res {
		if r.Reason != ReasonGreylisted || !r.Temporary {
			t.Errorf("%s: %s/%s temporary %v, want unknown/greylisted", r.Email, r.Status, r.Reason, r.Temporary)
		}
	}
	if strings.Contains(logs.String(), "throttles this egress") {
		t.Errorf("a greylisting server was paused as throttling: %s", logs.String())
	}
}
