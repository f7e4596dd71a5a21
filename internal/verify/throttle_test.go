package verify

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/testredis"
)

// limitingSMTP is a loopback mail server for h.test that limits its
// clients the way Postfix's anvil does, with Postfix's texts: banner(n)
// answers the n-th connection (0-based; "" is a normal 220), and rcptOK
// says whether a RCPT may be answered now (false: "450 4.7.1 Error: too
// many recipients from <client>"). Local parts starting with "no" and the
// catch-all probe are unknown users; the rest exist.
type limitingSMTP struct {
	port     int
	sessions atomic.Int64
}

func startLimitingSMTP(t *testing.T, banner func(n int, client string) string, rcptOK func() bool) *limitingSMTP {
	t.Helper()
	s := &limitingSMTP{}
	s.port = listenSMTP(t, func(c net.Conn) {
		n := int(s.sessions.Add(1)) - 1
		s.serve(c, n, banner, rcptOK)
	})
	return s
}

func (s *limitingSMTP) serve(c net.Conn, n int, banner func(int, string) string, rcptOK func() bool) {
	defer c.Close()
	sessionDeadline(c, 10*time.Second)
	client, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	w := bufio.NewWriter(c)
	if b := banner(n, client); b != "" {
		w.WriteString(b + "\r\n")
		w.Flush()
		return
	}
	w.WriteString("220 mx.h.test ESMTP\r\n")
	w.Flush()
	postfixDialogue(c, w, func() string {
		if rcptOK != nil && !rcptOK() {
			return "450 4.7.1 Error: too many recipients from " + client
		}
		return ""
	})
}

// throttleVerifier is a verifier of h.test (MX mx.h.test on 127.0.0.1,
// the server on port) with short throttling pauses, logging to logs.
func throttleVerifier(t *testing.T, port int, lim HostLimiter, logs *lockedBuffer) *Verifier {
	t.Helper()
	v, err := New(Config{DNSServer: hTestDNS(t), SMTPPort: port, CommandTimeout: time.Second, Policy: loopbackAllowed,
		ThrottlePause: 200 * time.Millisecond, ThrottlePauseMax: 2 * time.Second, SessionIdle: -1,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// h.test addresses: yes* exist, no* are unknown.
func throttleCases(n int) (emails []string, want map[string]string) {
	want = map[string]string{}
	for i := range n {
		e := fmt.Sprintf("yes%d@h.test", i)
		want[e] = ReasonAccepted
		if i%2 == 1 {
			e = fmt.Sprintf("no%d@h.test", i)
			want[e] = ReasonMailboxNotFound
		}
		emails = append(emails, e)
	}
	return emails, want
}

// checkRight reports the addresses whose answer is not their truth, and
// fails on any blocked or rate_limited answer.
func checkRight(t *testing.T, res []Result, want map[string]string) {
	t.Helper()
	for _, r := range res {
		if r.Reason == ReasonBlocked {
			t.Errorf("%s answered blocked: a throttling reply is no block", r.Email)
		}
		if r.Reason != want[r.Email] {
			t.Errorf("%s: %s/%s, want %s", r.Email, r.Status, r.Reason, want[r.Email])
		}
	}
}

// noLongBackoff fails when the server is backed off for longer than the
// throttling pauses can last (a block's 30 minutes).
func noLongBackoff(t *testing.T, v *Verifier, lim *LocalLimiter) {
	t.Helper()
	key := ServerKey("", "127.0.0.1")
	rel, left, err := lim.AcquireOrBackoff(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if rel != nil {
		rel()
	}
	if left > v.cfg.ThrottlePauseMax {
		t.Errorf("the server is backed off for %v after throttling, want at most the %v pause", left, v.cfg.ThrottlePauseMax)
	}
	if b, _ := v.blocks.get(key, time.Now()); b {
		t.Error("the server is recorded as blocking us")
	}
}

// TestThrottleAnvil421: Postfix's anvil refuses a connection with "421
// 4.7.0 mx Error: too many connections from <client>" (its connection
// count or rate limit). It names the client and has a 4.7.x code, which
// the block rule used to read as a block of our IP: a 30-minute back-off
// and every address unknown/blocked. It is throttling: the server is
// paused for a moment and the addresses are asked again in the same call.
func TestThrottleAnvil421(t *testing.T) {
	srv := startLimitingSMTP(t, func(n int, client string) string {
		if n < 2 {
			return "421 4.7.0 mx.h.test Error: too many connections from " + client
		}
		return ""
	}, nil)
	lim := NewLocalLimiter(LimiterOptions{})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, lim, &logs)
	before := testutil.ToFloat64(smtpThrottlePauses.WithLabelValues("banner", "default"))
	emails, want := throttleCases(10)
	start := time.Now()
	res := v.Verify(context.Background(), emails)
	took := time.Since(start)
	checkRight(t, res, want)
	noLongBackoff(t, v, lim)
	// Two refused connections: pauses of 200 ms then 400 ms.
	if took > 5*time.Second {
		t.Errorf("the call took %v: the pauses are 200 ms and 400 ms", took)
	}
	if got := testutil.ToFloat64(smtpThrottlePauses.WithLabelValues("banner", "default")) - before; got != 2 {
		t.Errorf("%v throttling pauses counted, want 2", got)
	}
	l := logs.String()
	if !strings.Contains(l, "throttles this egress; pausing it") || !strings.Contains(l, `"pause":"200ms"`) || !strings.Contains(l, `"pause":"400ms"`) {
		t.Errorf("no throttling log lines with growing pauses: %s", l)
	}
	if strings.Contains(l, "blocks this egress") {
		t.Errorf("a block was logged: %s", l)
	}
	// The next call goes straight through, and the pause starts short
	// again: the answered session reset the level.
	res = v.Verify(context.Background(), emails)
	checkRight(t, res, want)
	if d, _, _ := lim.Throttle(context.Background(), ServerKey("", "127.0.0.1"), 200*time.Millisecond, 2*time.Second); d != 200*time.Millisecond {
		t.Errorf("after a clean session the next pause is %v, want the first (200ms)", d)
	}
}

// TestThrottleAnvil421NoTime: when the call's deadline leaves no room for
// the pause, the addresses are answered rate_limited (unknown, Temporary,
// RetryAfter = the pause): the job's retry pass asks them again. Never
// blocked, and no 30-minute back-off.
func TestThrottleAnvil421NoTime(t *testing.T) {
	srv := startLimitingSMTP(t, func(n int, client string) string {
		return "421 4.7.0 mx.h.test Error: too many connections from " + client
	}, nil)
	lim := NewLocalLimiter(LimiterOptions{})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, lim, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	res := v.Verify(ctx, []string{"yes1@h.test", "no1@h.test"})
	for _, r := range res {
		if r.Reason != ReasonRateLimited || !r.Temporary || r.RetryAfter <= 0 || r.RetryAfter > 2*time.Second {
			t.Errorf("%s: %s temporary %v retry %v, want rate_limited, temporary, retry within the pause", r.Email, r.Reason, r.Temporary, r.RetryAfter)
		}
	}
	noLongBackoff(t, v, lim)

	// Without a deadline the call waits at most maxThrottles pauses
	// (here 200+400+800 ms before the fourth refusal) and then answers
	// rate_limited.
	lim = NewLocalLimiter(LimiterOptions{})
	v = throttleVerifier(t, srv.port, lim, &logs)
	start := time.Now()
	res = v.Verify(context.Background(), []string{"yes1@h.test"})
	if r := res[0]; r.Reason != ReasonRateLimited || !r.Temporary || r.RetryAfter <= 0 {
		t.Errorf("without a deadline: %s temporary %v retry %v, want rate_limited", r.Reason, r.Temporary, r.RetryAfter)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("without a deadline the call took %v, want about 1.4 s (three pauses)", took)
	}
	noLongBackoff(t, v, lim)
}

// TestThrottleRecipientRate: Postfix's per-client recipient rate
// (smtpd_client_recipient_rate_limit) answers "450 4.7.1 Error: too many
// recipients from <client>" once a client sent its RCPTs for the time
// unit. The answered addresses keep their answers; the rest are asked
// after the pause, in a new session, once the server's window has passed.
func TestThrottleRecipientRate(t *testing.T) {
	const perWindow, window = 5, 500 * time.Millisecond
	var mu sync.Mutex
	var windowStart time.Time
	count := 0
	rcptOK := func() bool {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if now.Sub(windowStart) > window {
			windowStart, count = now, 0
		}
		count++
		return count <= perWindow
	}
	srv := startLimitingSMTP(t, func(int, string) string { return "" }, rcptOK)
	lim := NewLocalLimiter(LimiterOptions{})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, lim, &logs)
	emails, want := throttleCases(12)
	res := v.Verify(context.Background(), emails)
	checkRight(t, res, want)
	noLongBackoff(t, v, lim)
	if !strings.Contains(logs.String(), `"stage":"rcpt"`) {
		t.Errorf("no throttling at RCPT logged: %s", logs.String())
	}
}

// TestDNSBLStillBlocks: a DNS block list's reply names the client too, and
// stays a block: unknown/blocked and the server backed off for the block's
// 30 minutes.
func TestDNSBLStillBlocks(t *testing.T) {
	srv := startScriptedSMTP(t, "220 mx.h.test ESMTP", func(cmd string) string {
		u := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(u, "EHLO"):
			return "250-mx.h.test\r\n250 PIPELINING"
		case strings.HasPrefix(u, "RCPT"):
			return "554 5.7.1 Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/127.0.0.1"
		}
		return "250 Ok"
	})
	lim := NewLocalLimiter(LimiterOptions{})
	var logs lockedBuffer
	v := throttleVerifier(t, srv.port, lim, &logs)
	for _, r := range v.Verify(context.Background(), []string{"yes1@h.test", "no1@h.test"}) {
		if r.Reason != ReasonBlocked || !r.Temporary {
			t.Errorf("%s: %s, want blocked", r.Email, r.Reason)
		}
	}
	rel, left, _ := lim.AcquireOrBackoff(context.Background(), ServerKey("", "127.0.0.1"))
	if rel != nil || left < 29*time.Minute {
		t.Errorf("server backed off for %v after a DNSBL block, want the 30-minute block back-off", left)
	}
	if l := logs.String(); !strings.Contains(l, "blocks this egress") || strings.Contains(l, "<a@") {
		t.Errorf("block log line: %s", l)
	}
}

// TestThrottlePauses: the pause doubles with each throttling reply that
// comes after the last pause ended, up to the maximum; replies during a
// pause change nothing; Unthrottle starts it short again. The same
// through Redis, shared by two limiters (two processes).
func TestThrottlePauses(t *testing.T) {
	ctx := context.Background()
	const base, most = 40 * time.Millisecond, 150 * time.Millisecond
	check := func(t *testing.T, a, b Throttler) {
		key := ServerKey("", "192.0.2.1")
		var got []time.Duration
		for range 4 {
			d, started, err := a.Throttle(ctx, key, base, most)
			if err != nil || !started {
				t.Fatalf("throttle: %v started %v", err, started)
			}
			// Another session's throttling reply during the pause: the
			// same pause, not a longer one.
			if d2, started2, _ := b.Throttle(ctx, key, base, most); started2 || d2 > d {
				t.Errorf("a reply during the pause started another (%v, %v)", d2, started2)
			}
			if left, _ := b.ThrottlePause(ctx, key); left <= 0 || left > d {
				t.Errorf("the other limiter sees a pause of %v, want (0, %v]", left, d)
			}
			got = append(got, d)
			time.Sleep(d + 20*time.Millisecond)
		}
		want := []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pauses %v, want %v", got, want)
		}
		if err := b.Unthrottle(ctx, key); err != nil {
			t.Fatal(err)
		}
		if d, _, _ := a.Throttle(ctx, key, base, most); d != base {
			t.Errorf("after Unthrottle the pause is %v, want %v", d, base)
		}
	}
	t.Run("local", func(t *testing.T) {
		l := NewLocalLimiter(LimiterOptions{})
		check(t, l, l)
	})
	t.Run("redis", func(t *testing.T) {
		srv := testredis.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		a, b := NewRedisLimiter(rdb, LimiterOptions{}), NewRedisLimiter(rdb, LimiterOptions{})
		check(t, a, b)
		// The pause is the server's back-off for every process.
		key := ServerKey("", "192.0.2.2")
		if _, _, err := a.Throttle(ctx, key, time.Second, time.Second); err != nil {
			t.Fatal(err)
		}
		if rel, left, err := b.AcquireSlot(ctx, Slot{Server: key}); err != nil || rel != nil || left <= 0 || left > time.Second {
			t.Errorf("the other process acquires during the pause: release %v, left %v, err %v", rel != nil, left, err)
		}
	})
}

// TestRedactReply: log lines carry no recipient address.
func TestRedactReply(t *testing.T) {
	got := redactReply("5.7.1 <jane.doe@example.com>: Recipient address rejected; from=<a@b.example> client 203.0.113.9")
	if strings.Contains(got, "@") || !strings.Contains(got, "203.0.113.9") {
		t.Errorf("redactReply = %q", got)
	}
}
