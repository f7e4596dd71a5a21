package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Options tune delivery; zero values are the defaults.
type Options struct {
	// Timeout bounds one attempt: connection, request and response
	// (default 10 s).
	Timeout time.Duration
	// MaxAge is how long an event is retried before it is given up
	// (default 24 h).
	MaxAge time.Duration
	// Backoff is the wait after the first failed attempt, doubled after
	// each (with jitter: a random point in its upper half), up to
	// MaxBackoff (defaults 10 s and 1 h).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Lease is how long a claimed event stays with its deliverer before
	// another may take it (default Timeout + 20 s).
	Lease time.Duration
	// Concurrency is how many events are sent at once (default 8).
	Concurrency int
	// Poll is how often due events are looked for (default 1 s); Sweep
	// how often jobs are looked at for events they owe (default 2 s).
	Poll  time.Duration
	Sweep time.Duration
	// MaxResponseBytes of a receiver's answer are read, the rest dropped
	// (default 64 KiB).
	MaxResponseBytes int64
	// Owner names this deliverer in claim tokens (default: random).
	Owner string
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 24 * time.Hour
	}
	if o.Backoff <= 0 {
		o.Backoff = 10 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Hour
	}
	o.MaxBackoff = max(o.MaxBackoff, o.Backoff)
	if o.Lease <= 0 {
		o.Lease = o.Timeout + 20*time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Sweep <= 0 {
		o.Sweep = 2 * time.Second
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 64 << 10
	}
	if o.Owner == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Owner = hex.EncodeToString(b[:])
	}
}

// Metrics are the deliverer's Prometheus collectors.
type Metrics struct {
	Enqueued       *prometheus.CounterVec
	Delivered      prometheus.Counter
	FailedAttempts *prometheus.CounterVec
	GivenUp        prometheus.Counter
}

// NewMetrics registers the webhook collectors on reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_webhook_events_enqueued_total", Help: "Webhook events enqueued, by type.",
		}, []string{"type"}),
		Delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_webhook_deliveries_total", Help: "Webhook events delivered (the receiver answered 2xx).",
		}),
		FailedAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulkd_webhook_failed_attempts_total", Help: "Webhook delivery attempts that failed, by reason: status (non-2xx), timeout, refused (target not allowed), error (connection, TLS).",
		}, []string{"reason"}),
		GivenUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bulkd_webhook_given_up_total", Help: "Webhook events given up after retrying for --webhook-max-age.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Enqueued, m.Delivered, m.FailedAttempts, m.GivenUp)
	}
	return m
}

// Deliverer sends due events and retries them. Any number may run against
// one Redis (every API replica, the controller): an event is claimed by
// one at a time, for a lease; a deliverer that dies leaves it to come due
// again when the lease ends.
type Deliverer struct {
	Queue   *Queue
	Secrets *Secrets
	Policy  *Policy
	Opts    Options
	Metrics *Metrics
	Log     *slog.Logger
	Now     func() time.Time

	client *http.Client
	seq    atomic.Uint64  // of the claim tokens
	busy   atomic.Int64   // attempts under way
	wg     sync.WaitGroup // of the attempts
}

// NewDeliverer returns a deliverer; opts' zero values are defaults.
func NewDeliverer(q *Queue, s *Secrets, p *Policy, opts Options, m *Metrics, log *slog.Logger) *Deliverer {
	opts.defaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	d := &Deliverer{Queue: q, Secrets: s, Policy: p, Opts: opts, Metrics: m, Log: log, Now: time.Now}
	tr := &http.Transport{
		Proxy:                 nil, // never through a proxy: the dialer's checks are the point
		DialContext:           p.DialContext(opts.Timeout),
		TLSHandshakeTimeout:   opts.Timeout,
		ResponseHeaderTimeout: opts.Timeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	d.client = &http.Client{
		Transport: tr,
		Timeout:   opts.Timeout,
		// No redirects: a 3xx is a failed attempt (a redirect could point
		// anywhere, and the receiver's URL is what the client gave).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return d
}

func (d *Deliverer) token() string {
	return d.Opts.Owner + ":" + strconv.FormatUint(d.seq.Add(1), 10)
}

// RunOnce claims the events due now (as many as there are free slots of
// Concurrency) and delivers them, waiting for the attempts to end. It
// returns how many it attempted.
func (d *Deliverer) RunOnce(ctx context.Context) (int, error) {
	n, err := d.dispatch(ctx)
	d.wg.Wait()
	return n, err
}

// dispatch claims due events for the free slots and starts their attempts
// without waiting for them.
func (d *Deliverer) dispatch(ctx context.Context) (int, error) {
	free := d.Opts.Concurrency - int(d.busy.Load())
	if free <= 0 {
		return 0, nil
	}
	now := d.Now()
	ids, err := d.Queue.Due(ctx, now, free)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		tok := d.token()
		e, err := d.Queue.Claim(ctx, id, now, now.Add(d.Opts.Lease), tok)
		if err != nil {
			return n, err
		}
		if e == nil {
			continue
		}
		n++
		d.busy.Add(1)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.busy.Add(-1)
			d.attempt(ctx, e, tok)
		}()
	}
	return n, nil
}

// attempt sends one claimed event once and records how it went.
func (d *Deliverer) attempt(ctx context.Context, e *Queued, tok string) {
	status, reason, err := d.send(ctx, e)
	if ctx.Err() != nil {
		// Stopping: the lease brings the event back to whoever runs next.
		return
	}
	now := d.Now()
	// The outcome is written even when ctx is ending: detached, bounded.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err == nil {
		if ok, ferr := d.Queue.finish(wctx, e, tok, StateDelivered, now, now, status, ""); ferr != nil {
			d.Log.Error("webhook delivered but not recorded; it will be sent again", "event", e.ID, "err", ferr)
		} else if ok {
			d.Metrics.Delivered.Inc()
			d.Log.Info("webhook delivered", "event", e.ID, "type", e.Type, "job", e.JobID, "status", status, "attempt", e.Attempts)
		}
		return
	}
	d.Metrics.FailedAttempts.WithLabelValues(reason).Inc()
	next := now.Add(d.backoff(e.Attempts))
	if next.After(e.EnqueuedAt.Add(d.Opts.MaxAge)) {
		if ok, ferr := d.Queue.finish(wctx, e, tok, StateFailed, now, now, status, err.Error()); ferr != nil {
			d.Log.Error("webhook give-up not recorded", "event", e.ID, "err", ferr)
		} else if ok {
			d.Metrics.GivenUp.Inc()
			d.Log.Error("webhook given up", "event", e.ID, "type", e.Type, "job", e.JobID, "account", e.AccountID,
				"attempts", e.Attempts, "since", e.EnqueuedAt, "last_status", status, "err", err)
		}
		return
	}
	if _, ferr := d.Queue.finish(wctx, e, tok, "retry", next, now, status, err.Error()); ferr != nil {
		d.Log.Error("webhook retry not recorded; the lease brings it back", "event", e.ID, "err", ferr)
	}
	d.Log.Warn("webhook attempt failed", "event", e.ID, "job", e.JobID, "attempt", e.Attempts, "status", status,
		"err", err, "next_attempt", next)
}

// backoff is the wait after failed attempt n (1-based): Backoff*2^(n-1),
// capped, with jitter in its upper half.
func (d *Deliverer) backoff(n int) time.Duration {
	b := d.Opts.Backoff
	for i := 1; i < n && b < d.Opts.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.Opts.MaxBackoff)
	half := b / 2
	if half <= 0 {
		return b
	}
	j, err := rand.Int(rand.Reader, big.NewInt(int64(half)+1))
	if err != nil {
		return b
	}
	return half + time.Duration(j.Int64())
}

// send POSTs the event; the error says why an attempt failed (reason:
// status, timeout, refused, error).
func (d *Deliverer) send(ctx context.Context, e *Queued) (status int, reason string, err error) {
	if _, prob := d.Policy.parse(e.URL); prob != nil {
		return 0, "refused", fmt.Errorf("%w: %s", ErrRefused, prob.Msg)
	}
	secrets, err := d.Secrets.Signing(ctx, e.AccountID)
	if err != nil {
		return 0, "error", err
	}
	ctx, cancel := context.WithTimeout(ctx, d.Opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(e.Body))
	if err != nil {
		return 0, "refused", fmt.Errorf("%w: %v", ErrRefused, err)
	}
	t := d.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bulkd-webhook/1")
	req.Header.Set("X-Bulkd-Event-Id", e.ID)
	req.Header.Set("X-Bulkd-Event-Type", e.Type)
	req.Header.Set("X-Bulkd-Timestamp", strconv.FormatInt(t.Unix(), 10))
	req.Header.Set("X-Bulkd-Signature", Sign(secrets, t, e.Body))
	res, err := d.client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, ErrRefused):
			return 0, "refused", err
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			return 0, "timeout", fmt.Errorf("no answer within %v: %w", d.Opts.Timeout, err)
		}
		return 0, "error", err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, d.Opts.MaxResponseBytes))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, "status", fmt.Errorf("receiver answered %d", res.StatusCode)
	}
	return res.StatusCode, "", nil
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// Service runs a sweeper and a deliverer until its context ends.
type Service struct {
	Sweeper   *Sweeper
	Deliverer *Deliverer
	Log       *slog.Logger
}

// Config is what New needs besides Redis.
type Config struct {
	Policy   *Policy
	Events   *Events
	Options  Options
	Registry prometheus.Registerer
	Log      *slog.Logger
}

// New builds the webhook service on rdb.
func New(rdb redis.UniversalClient, c Config) *Service {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	m := NewMetrics(c.Registry)
	q := NewQueue(rdb)
	d := NewDeliverer(q, NewSecrets(rdb), c.Policy, c.Options, m, c.Log)
	// The sweeper only reads jobs and their webhook marks (it settles none),
	// so the billing its store is given never pays anything.
	sw := &Sweeper{Store: jobs.NewStore(rdb, billing.New(rdb, nil)), Queue: q, Events: c.Events, MaxAge: d.Opts.MaxAge, Now: time.Now, Log: c.Log,
		Enqueued: func(typ string) { m.Enqueued.WithLabelValues(typ).Inc() }}
	return &Service{Sweeper: sw, Deliverer: d, Log: c.Log}
}

// Run sweeps and delivers until ctx ends. A sweep that enqueued events
// wakes the deliverer at once.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wake := make(chan struct{}, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		loop(ctx, s.Deliverer.Opts.Sweep, nil, func() {
			n, err := s.Sweeper.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				s.Log.Error("webhook sweep", "err", err)
			}
			if n > 0 {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
	}()
	go func() {
		defer wg.Done()
		loop(ctx, s.Deliverer.Opts.Poll, wake, func() {
			if _, err := s.Deliverer.dispatch(ctx); err != nil && ctx.Err() == nil {
				s.Log.Error("webhook delivery", "err", err)
			}
		})
	}()
	wg.Wait()
	s.Deliverer.wg.Wait() // attempts under way end with ctx (their leases bring them back)
}

func loop(ctx context.Context, every time.Duration, wake <-chan struct{}, f func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}
