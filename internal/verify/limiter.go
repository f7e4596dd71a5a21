package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// HostLimiter keeps SMTP sessions to each mail server polite. Its host
// arguments are keys: the verifier passes limitKey(egress, server), so
// politeness is counted per server address (and provider), not per MX name.
type HostLimiter interface {
	// Acquire waits until a new SMTP session to host may start: fewer than
	// the per-host cap of sessions open (across every process sharing the
	// limiter) and the per-host rate of new sessions respected, and the host
	// not in a back-off period. release ends the session's slot.
	Acquire(ctx context.Context, host string) (release func(), err error)
	// Backoff keeps new sessions away from host for d (it answered 421).
	Backoff(ctx context.Context, host string, d time.Duration) error
}

// BackoffAwareLimiter is implemented by both limiters here. The verifier
// uses it so that a host in back-off is skipped at once (next MX, or
// rate_limited with RetryAfter) rather than waited out for up to 30 s while
// the rest of a batch is done.
type BackoffAwareLimiter interface {
	HostLimiter
	// AcquireOrBackoff is Acquire, except that while host is in a back-off
	// period it returns at once with release nil and the time left.
	AcquireOrBackoff(ctx context.Context, host string) (release func(), backoff time.Duration, err error)
	// SessionsPerHost is the per-host cap, so the verifier opens no more
	// sessions to one host than it may.
	SessionsPerHost() int
}

// SessionCounter is implemented by both limiters here: how many sessions
// of a key are open now, over every call (and, for RedisLimiter, every
// process). A server that refuses a new session as "too many connections"
// counts all of them, not only the refused call's (banner421).
type SessionCounter interface {
	Holders(ctx context.Context, host string) (int64, error)
}

// LimiterOptions configure a limiter.
type LimiterOptions struct {
	// SessionsPerHost is the cap of concurrent sessions per host, default 3.
	// Large providers allow more, but small MTAs (Postfix's default
	// smtpd_client_connection_count_limit is 50 for everybody together, and
	// many sites set 2..5 per client) answer 421 beyond a handful; 3 is
	// what a well-behaved sending MTA opens to an unknown host.
	SessionsPerHost int
	// SessionsPerSecond is the rate of new sessions per host, default 5
	// (GCRA with a burst of SessionsPerHost): Postfix's anvil default
	// smtpd_client_connection_rate_limit is 0 (off) but sites that set it
	// commonly allow 10..60 per minute per client; verification sessions
	// carry up to MaxRcptsPerSession recipients, so few are needed.
	SessionsPerSecond float64
	// LeaseTTL frees the slot of a holder that crashed without releasing,
	// default 2m. A live session renews its lease every LeaseTTL/3.
	LeaseTTL time.Duration
	// Prefix of the Redis keys, default "bulkd:smtp:".
	Prefix string
}

// Slot is what one SMTP session is counted against: the server address it
// dials and, when the rules table knows it, the provider running it.
type Slot struct {
	// Server is the server's key (limitKey(egress, "ip:"+address)): its
	// open sessions, its rate of new ones, its back-off.
	Server string
	// Cap is the server's session cap; 0: LimiterOptions.SessionsPerHost.
	Cap int
	// Provider is the provider's key (limitKey(egress, "provider:"+name)),
	// "" when unknown: its open sessions over all its servers and its
	// back-off (a block backs off the whole provider).
	Provider string
	// ProviderCap caps the provider's sessions; 0: no cap (its back-off
	// still applies).
	ProviderCap int
}

// SlotLimiter is implemented by both limiters here: one acquisition holds
// a server slot and a provider slot together.
type SlotLimiter interface {
	// AcquireSlot is AcquireOrBackoff for a Slot: it waits for both caps
	// and the server's rate, and returns at once with release nil and the
	// time left while the server or the provider is backed off.
	AcquireSlot(ctx context.Context, s Slot) (release func(), backoff time.Duration, err error)
}

// DefaultEgress is the egress part of a key when sessions leave from the
// host's own address.
const DefaultEgress = "default"

// limitKey is the one place politeness keys are built: what a server (or
// a provider) allows is counted per client address, so every key names
// the egress the sessions leave from ("" is DefaultEgress) and the server:
// "ip:<address>" or "provider:<name>". Limits that are the server's own
// policy whatever the client (RCPTs per session) use AnyEgress.
func limitKey(egress, server string) string {
	if egress == "" {
		egress = DefaultEgress
	}
	return "egress=" + egress + "|" + server
}

// ServerKey is the limiter key of sessions from egress ("": the default)
// to the server at address addr, for operators' tools and tests.
func ServerKey(egress, addr string) string { return limitKey(egress, "ip:"+addr) }

// ProviderKey is the limiter key of sessions from egress to all of a
// provider's servers.
func ProviderKey(egress, provider string) string { return limitKey(egress, "provider:"+provider) }

// AnyEgress is the egress part of keys that do not depend on the client.
const AnyEgress = "*"

func (o LimiterOptions) withDefaults() LimiterOptions {
	if o.SessionsPerHost <= 0 {
		o.SessionsPerHost = 3
	}
	if o.SessionsPerSecond <= 0 {
		o.SessionsPerSecond = 5
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Minute
	}
	if o.Prefix == "" {
		o.Prefix = "bulkd:smtp:"
	}
	return o
}

func (o LimiterOptions) interval() time.Duration {
	return time.Duration(float64(time.Second) / o.SessionsPerSecond)
}

// WaitError is returned by Acquire when the wait it would need ends after
// the context's deadline: failing at once lets the caller answer
// rate_limited with RetryAfter instead of sleeping into its deadline.
type WaitError struct {
	Host       string
	RetryAfter time.Duration
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("smtp limiter: %s: next session in %v, after the deadline", e.Host, e.RetryAfter)
}

// maxSleep caps one sleep of a waiting Acquire, so a waiter notices a
// context ending (the select does) and changes made by other processes.
const maxSleep = time.Second

// sleep waits d with ±10 % jitter (so waiters of one host do not wake in
// lock step), capped at maxSleep, or until wake is closed or ctx ends.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	d = min(d, maxSleep)
	if d > 0 {
		d += time.Duration((rand.Float64()*0.2 - 0.1) * float64(d))
	}
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C:
	}
	return nil
}

// beyondDeadline reports whether waiting d would end after ctx's deadline.
func beyondDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Now().Add(d).After(dl)
}

// LocalLimiter is an in-process HostLimiter: right for a single process,
// and the fallback of RedisLimiter when Redis is unreachable.
type LocalLimiter struct {
	opts  LimiterOptions
	mu    sync.Mutex
	hosts map[string]*localHost
}

type localHost struct {
	open    int
	tat     time.Time // GCRA theoretical arrival time
	backoff time.Time // no new session before this
	wake    chan struct{}
	// Throttling (Throttler): the pause in force, its level and how long
	// the level lives.
	pausedUntil time.Time
	level       int
	levelUntil  time.Time
}

// NewLocalLimiter returns an in-process limiter.
func NewLocalLimiter(opts LimiterOptions) *LocalLimiter {
	return &LocalLimiter{opts: opts.withDefaults(), hosts: map[string]*localHost{}}
}

// SessionsPerHost returns the per-host cap.
func (l *LocalLimiter) SessionsPerHost() int { return l.opts.SessionsPerHost }

// Acquire implements HostLimiter.
func (l *LocalLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	return l.acquire(ctx, Slot{Server: host}, false)
}

// AcquireOrBackoff implements BackoffAwareLimiter.
func (l *LocalLimiter) AcquireOrBackoff(ctx context.Context, host string) (func(), time.Duration, error) {
	return l.AcquireSlot(ctx, Slot{Server: host})
}

// AcquireSlot implements SlotLimiter.
func (l *LocalLimiter) AcquireSlot(ctx context.Context, s Slot) (func(), time.Duration, error) {
	rel, err := l.acquire(ctx, s, true)
	var be *backoffErr
	if errors.As(err, &be) {
		return nil, be.left, nil
	}
	return rel, 0, err
}

type backoffErr struct{ left time.Duration }

func (e *backoffErr) Error() string { return "host in back-off" }

func (l *LocalLimiter) get(key string) *localHost {
	h := l.hosts[key]
	if h == nil {
		h = &localHost{wake: make(chan struct{})}
		l.hosts[key] = h
	}
	return h
}

func (l *LocalLimiter) acquire(ctx context.Context, s Slot, failOnBackoff bool) (func(), error) {
	interval := l.opts.interval()
	capS := s.Cap
	if capS <= 0 {
		capS = l.opts.SessionsPerHost
	}
	tau := time.Duration(capS-1) * interval
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.mu.Lock()
		h := l.get(s.Server)
		var p *localHost
		if s.Provider != "" {
			p = l.get(s.Provider)
		}
		now := time.Now()
		var wait time.Duration
		known := true // wait is a known duration (not "until a release")
		wake := h.wake
		backoff := h.backoff
		if p != nil && p.backoff.After(backoff) {
			backoff = p.backoff
		}
		switch {
		case now.Before(backoff):
			wait = backoff.Sub(now)
			if failOnBackoff {
				l.mu.Unlock()
				return nil, &backoffErr{left: wait}
			}
		case h.open >= capS:
			wait, known = maxSleep, false
		case p != nil && s.ProviderCap > 0 && p.open >= s.ProviderCap:
			wait, known, wake = maxSleep, false, p.wake
		default:
			tat := h.tat
			if tat.Before(now) {
				tat = now
			}
			if tat.Sub(now) > tau {
				wait = tat.Sub(now) - tau
				break
			}
			h.tat = tat.Add(interval)
			h.open++
			if p != nil {
				p.open++
			}
			l.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					defer l.mu.Unlock()
					l.release(s.Server)
					if s.Provider != "" {
						l.release(s.Provider)
					}
				})
			}, nil
		}
		l.mu.Unlock()
		if known && beyondDeadline(ctx, wait) {
			return nil, &WaitError{Host: s.Server, RetryAfter: wait}
		}
		if err := sleep(ctx, wait, wake); err != nil {
			return nil, err
		}
	}
}

// release gives back one session of key. Caller holds l.mu.
func (l *LocalLimiter) release(key string) {
	h := l.hosts[key]
	if h == nil {
		return
	}
	h.open--
	close(h.wake)
	h.wake = make(chan struct{})
	now := time.Now()
	if h.open <= 0 && !h.tat.After(now) && !h.backoff.After(now) && !h.levelUntil.After(now) {
		delete(l.hosts, key)
	}
}

// Holders implements SessionCounter.
func (l *LocalLimiter) Holders(_ context.Context, host string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.hosts[host]; h != nil {
		return int64(max(h.open, 0)), nil
	}
	return 0, nil
}

// Backoff implements HostLimiter. A back-off only ever extends.
func (l *LocalLimiter) Backoff(_ context.Context, host string, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.get(host)
	if until := time.Now().Add(d); until.After(h.backoff) {
		h.backoff = until
	}
	return nil
}
