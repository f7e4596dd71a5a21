package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// progressChannel is the Redis pub/sub channel on which processors announce
// that a job moved (answers recorded, a shard done, a retry pass over). A
// message is the job id and what happened ("<id> rows", "<id> ended"),
// nothing more: it only wakes the Kubernetes controller, which reads the
// job's counters itself. Pub/sub keeps nothing
// in Redis; what a subscriber misses while it is not subscribed it makes up
// for by reading every job again when it (re)subscribes (WatchProgress).
const progressChannel = prefix + "progress"

// PublishProgress announces that job id moved: answers were recorded, or
// (ended) a shard or a retry pass is over, after which the job's phase may
// change.
func (s *Store) PublishProgress(ctx context.Context, id string, ended bool) error {
	kind := "rows"
	if ended {
		kind = "ended"
	}
	if err := s.rdb.Publish(ctx, progressChannel, id+" "+kind).Err(); err != nil {
		return fmt.Errorf("announce progress of %s: %w", id, err)
	}
	return nil
}

// ProgressHandler is what WatchProgress calls.
type ProgressHandler struct {
	// Subscribed is called each time the subscription is established, the
	// first time and after every reconnection: announcements made while it
	// was down are lost, so every job must be read again.
	Subscribed func()
	// Job is called for every announcement, with the job's id; ended says
	// a shard or a retry pass is over (rather than answers recorded).
	Job func(id string, ended bool)
	// Broken is called when the subscription fails (Redis down, say);
	// WatchProgress tries again after a pause that grows to 30 s.
	Broken func(err error)
}

// progressPing is how long a subscription may stay silent before a PING
// checks that its connection is still alive (a dead connection is then
// replaced, and the new subscription calls Subscribed).
const progressPing = 30 * time.Second

// WatchProgress listens to the processors' announcements until ctx ends
// (then it returns nil). It never gives up: a broken subscription is
// retried with a growing pause.
func (s *Store) WatchProgress(ctx context.Context, h ProgressHandler) error {
	ps := s.rdb.Subscribe(ctx, progressChannel)
	// A blocked read does not watch ctx: closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	pause := time.Duration(0)
	for {
		msg, err := ps.ReceiveTimeout(ctx, progressPing)
		if ctx.Err() != nil {
			return nil
		}
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			// Silence: check the connection; a dead one fails the PING,
			// which reconnects and subscribes again.
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = ps.Ping(pctx)
			cancel()
			continue
		case err != nil:
			if h.Broken != nil {
				h.Broken(fmt.Errorf("progress subscription: %w", err))
			}
			pause = min(max(2*pause, time.Second), 30*time.Second)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && h.Subscribed != nil {
				h.Subscribed()
			}
		case *redis.Message:
			if id, kind, _ := strings.Cut(m.Payload, " "); h.Job != nil && id != "" {
				h.Job(id, kind == "ended")
			}
		}
	}
}

// DefaultAnnounceEvery is how often a processor announces the progress of
// one shard at most (its end is always announced).
const DefaultAnnounceEvery = time.Second

// Announcer publishes a processor's progress: recorded answers at most once
// per Every for each job and shard, a finished shard or retry pass always.
// An announcement that fails is logged and dropped: it only hurries the
// controller, whose periodic resync reads every job's progress anyway.
type Announcer struct {
	Store *Store
	Every time.Duration
	Log   *slog.Logger

	mu   sync.Mutex
	last map[announced]time.Time
}

type announced struct {
	job   string
	shard int // -1: retries
}

// NewAnnouncer returns an announcer on st.
func NewAnnouncer(st *Store, every time.Duration, log *slog.Logger) *Announcer {
	if log == nil {
		log = slog.Default()
	}
	return &Announcer{Store: st, Every: every, Log: log, last: map[announced]time.Time{}}
}

// Progress announces answers recorded for a shard (-1: retries), unless
// the last announcement for it is less than Every old.
func (a *Announcer) Progress(ctx context.Context, jobID string, shard int) {
	k := announced{jobID, shard}
	now := time.Now()
	a.mu.Lock()
	if now.Sub(a.last[k]) < a.Every {
		a.mu.Unlock()
		return
	}
	a.last[k] = now
	a.mu.Unlock()
	a.publish(ctx, jobID, false)
}

// Done announces that a shard (-1: a retry pass) is over.
func (a *Announcer) Done(ctx context.Context, jobID string, shard int) {
	a.mu.Lock()
	delete(a.last, announced{jobID, shard})
	a.mu.Unlock()
	a.publish(ctx, jobID, true)
}

func (a *Announcer) publish(ctx context.Context, jobID string, ended bool) {
	// Bounded, and detached from a shard whose time is up: its last
	// answers are recorded and worth announcing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := a.Store.PublishProgress(ctx, jobID, ended); err != nil {
		a.Log.Warn("progress announcement failed; the controller's resync will see it", "job", jobID, "err", err)
	}
}

// announceProgress and announceDone are no-ops without an Announcer
// (standalone mode reads progress straight from Redis).
func (p *Processor) announceProgress(ctx context.Context, jobID string, shard int) {
	if p.Announce != nil {
		p.Announce.Progress(ctx, jobID, shard)
	}
}

func (p *Processor) announceDone(ctx context.Context, jobID string, shard int) {
	if p.Announce != nil {
		p.Announce.Done(ctx, jobID, shard)
	}
}
