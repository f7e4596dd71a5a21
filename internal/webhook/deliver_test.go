package webhook

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/testredis"
)

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// received is one request a test receiver got.
type received struct {
	Header http.Header
	Body   []byte
}

// receiver is a real HTTP server on loopback whose answers a test scripts:
// answer(n) for the n-th request (1-based) returns a status, or 0 to hang
// until the client gives up.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	hang chan struct{}
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	r := &receiver{hang: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Clone(), body})
		n := len(r.got)
		r.mu.Unlock()
		st := answer(n)
		if st == 0 {
			select {
			case <-req.Context().Done():
			case <-r.hang:
			}
			return
		}
		w.WriteHeader(st)
		_, _ = io.WriteString(w, strings.Repeat("x", 100_000)) // read only up to the bound
	}))
	t.Cleanup(func() { close(r.hang); r.Close() })
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastOptions make retries come within milliseconds.
func fastOptions() Options {
	return Options{Timeout: 300 * time.Millisecond, Backoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond,
		Lease: 2 * time.Second, Poll: 10 * time.Millisecond, Sweep: 20 * time.Millisecond, MaxAge: time.Minute}
}

func newTestDeliverer(rdb redis.UniversalClient, p *Policy, o Options, reg prometheus.Registerer) *Deliverer {
	return NewDeliverer(NewQueue(rdb), NewSecrets(rdb), p, o, NewMetrics(reg), quietLog())
}

func enqueue(t *testing.T, q *Queue, id, url string) {
	t.Helper()
	ok, err := q.Enqueue(context.Background(), Queued{ID: id, Type: TypeCompleted, JobID: "job-" + id, AccountID: "acct_t1", URL: url,
		Body: []byte(`{"event_id":"` + id + `","type":"job.completed"}`)}, time.Now(), time.Minute)
	if err != nil || !ok {
		t.Fatalf("enqueue %s: %v %v", id, ok, err)
	}
}

// runUntil runs the deliverer's loop until ok holds (or fails after d).
func runUntil(t *testing.T, d *Deliverer, dur time.Duration, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	for !ok() {
		if ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for %s", dur, what)
		}
		if _, err := d.RunOnce(ctx); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A receiver that fails (500), then times out, then accepts: three
// attempts of the same event (same id, same body), each signed with the
// account's secret, and the event recorded as delivered; enqueueing it
// again changes nothing.
func TestDeliveryRetriesUntilAccepted(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	rec := newReceiver(t, func(n int) int { return map[int]int{1: 500, 2: 0}[n] + map[bool]int{true: 204}[n >= 3] })
	reg := prometheus.NewRegistry()
	d := newTestDeliverer(rdb, &Policy{AllowLoopback: true}, fastOptions(), reg)
	enqueue(t, d.Queue, "evt_a", rec.URL+"/hook")
	if ok, _ := d.Queue.Enqueue(ctx, Queued{ID: "evt_a", URL: rec.URL + "/other"}, time.Now(), time.Minute); ok {
		t.Fatal("the same event enqueued twice")
	}
	runUntil(t, d, 10*time.Second, "delivery", func() bool {
		e, _ := d.Queue.Get(ctx, "evt_a")
		return e != nil && e.State == StateDelivered
	})
	got := rec.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	secret, err := d.Secrets.Current(ctx, "acct_t1")
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q %v", secret, err)
	}
	for i, r := range got {
		if r.Header.Get("X-Bulkd-Event-Id") != "evt_a" || r.Header.Get("Content-Type") != "application/json" ||
			string(r.Body) != string(got[0].Body) {
			t.Errorf("request %d: headers %v body %s", i+1, r.Header, r.Body)
		}
		sig := r.Header.Get("X-Bulkd-Signature")
		if !strings.HasPrefix(sig, "t="+r.Header.Get("X-Bulkd-Timestamp")+",v1=") {
			t.Errorf("request %d: signature %q, timestamp %q", i+1, sig, r.Header.Get("X-Bulkd-Timestamp"))
		}
		if err := Verify(sig, secret, r.Body, 5*time.Minute, time.Now()); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
	e, _ := d.Queue.Get(ctx, "evt_a")
	if e.Attempts != 3 || e.LastStatus != 204 || e.URL != rec.URL+"/hook" {
		t.Errorf("event after delivery: %+v", e)
	}
	if n, _ := d.Queue.Pending(ctx); n != 0 {
		t.Errorf("%d events still queued", n)
	}
	if v := testutil.ToFloat64(d.Metrics.Delivered); v != 1 {
		t.Errorf("delivered metric %v", v)
	}
	for reason, want := range map[string]float64{"status": 1, "timeout": 1} {
		if v := testutil.ToFloat64(d.Metrics.FailedAttempts.WithLabelValues(reason)); v != want {
			t.Errorf("failed attempts (%s) %v, want %v", reason, v, want)
		}
	}
	// Delivered events stay known: enqueueing again is a no-op.
	if ok, _ := d.Queue.Enqueue(ctx, Queued{ID: "evt_a", URL: rec.URL}, time.Now(), time.Minute); ok {
		t.Error("a delivered event enqueued again")
	}
	if n, _ := d.RunOnce(ctx); n != 0 || len(rec.requests()) != 3 {
		t.Errorf("a delivered event was sent again")
	}
}

// A deliverer that dies in the middle of an attempt (its context ends, as
// the process would) leaves its claim to run out: another deliverer sends
// the event again after the lease, with the same id, and the first one's
// late answer changes nothing.
func TestLeaseExpiryRedelivers(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	rec := newReceiver(t, func(n int) int {
		if n == 1 {
			return 0 // the first attempt never gets an answer
		}
		return 200
	})
	o := fastOptions()
	o.Timeout, o.Lease = 5*time.Second, 400*time.Millisecond
	a := newTestDeliverer(rdb, &Policy{AllowLoopback: true}, o, nil)
	enqueue(t, a.Queue, "evt_b", rec.URL)

	actx, kill := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = a.RunOnce(actx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first attempt never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first, _ := a.Queue.Get(ctx, "evt_b")
	kill()
	<-done
	if e, _ := a.Queue.Get(ctx, "evt_b"); e.State != StatePending || e.Lease != first.Lease {
		t.Fatalf("after the kill: %+v", e)
	}

	o.Owner = "second"
	b := newTestDeliverer(rdb, &Policy{AllowLoopback: true}, o, nil)
	if n, _ := b.RunOnce(ctx); n != 0 {
		t.Fatal("the event was taken again while its lease held")
	}
	runUntil(t, b, 5*time.Second, "redelivery", func() bool {
		e, _ := b.Queue.Get(ctx, "evt_b")
		return e.State == StateDelivered
	})
	got := rec.requests()
	if len(got) != 2 || got[1].Header.Get("X-Bulkd-Event-Id") != "evt_b" || string(got[0].Body) != string(got[1].Body) {
		t.Fatalf("requests: %d %v", len(got), got)
	}
	// The dead deliverer's claim no longer counts.
	if ok, err := a.Queue.finish(ctx, first, first.Lease, "retry", time.Now(), time.Now(), 500, "late"); ok || err != nil {
		t.Fatalf("a stale claim finished the event: %v %v", ok, err)
	}
	if e, _ := a.Queue.Get(ctx, "evt_b"); e.State != StateDelivered || e.Attempts != 2 {
		t.Fatalf("event %+v", e)
	}
}

// At delivery the target is checked again after resolution: a name that
// resolved to a public address at submission and now points at loopback
// (or a private address) is refused without a connection, and retried
// until it is given up.
func TestDeliveryRefusesRebindingAndGivesUp(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	rec := newReceiver(t, func(int) int { return 200 })
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rec.URL, "http://"))
	dns := testDNS()
	dns.set("rebind.example.com", "93.184.216.34")
	p := &Policy{Resolver: dns}
	url := "https://rebind.example.com:" + port + "/hook"
	if prob := p.CheckURL(ctx, url); prob != nil {
		t.Fatalf("submission check: %v", prob)
	}
	dns.set("rebind.example.com", "127.0.0.1")
	o := fastOptions()
	o.MaxAge = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	d := newTestDeliverer(rdb, p, o, reg)
	enqueue(t, d.Queue, "evt_c", url)
	enqueue(t, d.Queue, "evt_d", "https://private.example.com/hook")
	runUntil(t, d, 10*time.Second, "give-up", func() bool {
		c, _ := d.Queue.Get(ctx, "evt_c")
		e, _ := d.Queue.Get(ctx, "evt_d")
		return c.State == StateFailed && e.State == StateFailed
	})
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
	c, _ := d.Queue.Get(ctx, "evt_c")
	if !strings.Contains(c.LastError, "refused") || !strings.Contains(c.LastError, "loopback") || c.Attempts < 2 {
		t.Errorf("event %+v", c)
	}
	if v := testutil.ToFloat64(d.Metrics.GivenUp); v != 2 {
		t.Errorf("given up %v", v)
	}
	if v := testutil.ToFloat64(d.Metrics.FailedAttempts.WithLabelValues("refused")); v < 4 {
		t.Errorf("refused attempts %v", v)
	}
	if n, _ := d.Queue.Pending(ctx); n != 0 {
		t.Errorf("%d still queued", n)
	}
}

// Failed attempts are retried with exponential backoff: by default 10 s
// after the first, doubling up to 1 h, each wait a random point in the
// upper half of its step, for 24 h.
func TestBackoff(t *testing.T) {
	var o Options
	o.defaults()
	if o.Backoff != 10*time.Second || o.MaxBackoff != time.Hour || o.MaxAge != 24*time.Hour {
		t.Fatalf("defaults: backoff %v, max %v, max age %v", o.Backoff, o.MaxBackoff, o.MaxAge)
	}
	d := &Deliverer{Opts: o}
	step := o.Backoff
	for n := 1; n <= 12; n++ {
		for range 20 {
			if got := d.backoff(n); got < step/2 || got > step {
				t.Fatalf("wait after attempt %d: %v, want within [%v, %v]", n, got, step/2, step)
			}
		}
		step = min(2*step, o.MaxBackoff)
	}
}

// Rotation: the new secret signs at once, the previous one too for 24 h.
func TestSecretRotation(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s := NewSecrets(rdb)
	s.Now = func() time.Time { return now }
	old, err := s.Current(ctx, "acct_r")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Current(ctx, "acct_r"); again != old {
		t.Fatal("the secret changed without a rotation")
	}
	nw, err := s.Rotate(ctx, "acct_r")
	if err != nil || nw == old {
		t.Fatalf("rotate: %q %v", nw, err)
	}
	sig, _ := s.Signing(ctx, "acct_r")
	if len(sig) != 2 || sig[0] != nw || sig[1] != old {
		t.Fatalf("signing secrets %v", sig)
	}
	body := []byte("{}")
	h := Sign(sig, now, body)
	if Verify(h, old, body, 0, now) != nil || Verify(h, nw, body, 0, now) != nil {
		t.Fatal("a header signed with both does not verify with each")
	}
	now = now.Add(RotationGrace + time.Second)
	if sig, _ := s.Signing(ctx, "acct_r"); len(sig) != 1 || sig[0] != nw {
		t.Fatalf("after the grace period: %v", sig)
	}
}
