package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Event types.
const (
	TypeCompleted = "job.completed"
	// A family whose users see a retrying state
	// (family.RetryingAnnouncer) also announces entering it: "job." +
	// that status, e.g. job.partial_complete_retrying for email
	// verification.
	typePrefix = "job."
)

// Event is the JSON body POSTed to a webhook (docs/webhooks.md).
type Event struct {
	EventID   string           `json:"event_id"`
	Type      string           `json:"type"`
	CreatedAt time.Time        `json:"created_at"`
	JobID     string           `json:"job_id"`
	Family    string           `json:"family"`
	Status    string           `json:"status"`
	Counts    map[string]int64 `json:"counts"`
	Links     Links            `json:"links"`
	// CreditsRefunded is set on job.deleted only: what the deletion gave
	// back (the inputs it never processed).
	CreditsRefunded *float64 `json:"credits_refunded,omitempty"`
	// ExpiresAt is set on job.expiring only: when the job and its results
	// are deleted (its retention ends).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Links point at the job's status and results: paths relative to the API,
// and absolute URLs when a public base URL is configured.
type Links struct {
	Status     string `json:"status"`
	Results    string `json:"results"`
	StatusURL  string `json:"status_url,omitempty"`
	ResultsURL string `json:"results_url,omitempty"`
}

// eventNS makes event ids: UUIDv5 of "<job id>/<type>", so the same
// transition of the same job always has the same id.
var eventNS = uuid.MustParse("6f2c1d3e-0b7a-5c4e-9d8f-1a2b3c4d5e6f")

// EventID is the stable id of a job's event of a type.
func EventID(jobID, typ string) string {
	return "evt_" + uuid.NewSHA1(eventNS, []byte(jobID+"/"+typ)).String()
}

// Mount is where a family's jobs are read over the API: its status path
// ("/v1/bulk"); Unlimited for the mount of unlimited-plan keys (a job paid
// with quota).
type Mount struct {
	Family    family.Family
	Path      string
	Unlimited bool
}

// Events builds the events of jobs from their families.
type Events struct {
	Mounts []Mount
	// PublicURL, when set, is the API's public base URL
	// (https://api.example.com): links carry absolute URLs too.
	PublicURL string
}

// mount is the mount j was submitted on (unlimited or not), or another of
// its family.
func (ev *Events) mount(j *jobs.Job) (Mount, bool) {
	unlimited := j.QuotaWindow != ""
	var other Mount
	found := false
	for _, m := range ev.Mounts {
		if m.Family.Name() != j.Family {
			continue
		}
		if m.Unlimited == unlimited {
			return m, true
		}
		if !found {
			other, found = m, true
		}
	}
	return other, found
}

// Build makes job j's event at t: its completion, or with retrying its
// retrying event (false when j's family announces none).
func (ev *Events) Build(j *jobs.Job, retrying bool, at time.Time) (*Event, bool, error) {
	m, ok := ev.mount(j)
	if !ok {
		return nil, false, fmt.Errorf("webhook: no mount for family %q", j.Family)
	}
	typ := TypeCompleted
	var retryingStatus string
	if retrying {
		if retryingStatus, ok = family.RetryingStatus(m.Family); !ok {
			return nil, false, nil
		}
		typ = typePrefix + retryingStatus
	}
	raw, err := json.Marshal(m.Family.Status(j))
	if err != nil {
		return nil, false, err
	}
	var st struct {
		Status  string           `json:"status"`
		Summary map[string]int64 `json:"summary"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, false, err
	}
	if retrying {
		st.Status = retryingStatus
	}
	if st.Summary == nil {
		st.Summary = map[string]int64{}
	}
	status := m.Path + "/" + j.ID
	e := &Event{EventID: EventID(j.ID, typ), Type: typ, CreatedAt: at.UTC(), JobID: j.ID, Family: j.Family,
		Status: st.Status, Counts: st.Summary, Links: Links{Status: status, Results: status + "/results"}}
	if base := strings.TrimRight(ev.PublicURL, "/"); base != "" {
		e.Links.StatusURL, e.Links.ResultsURL = base+e.Links.Status, base+e.Links.Results
	}
	return e, true, nil
}

// Sweeper turns the transitions of jobs with a webhook into queued events.
type Sweeper struct {
	Store  *jobs.Store
	Queue  *Queue
	Events *Events
	// MaxAge is how long an event's delivery is retried.
	MaxAge time.Duration
	Now    func() time.Time
	Log    *slog.Logger
	// Enqueued counts events enqueued (nil: not counted).
	Enqueued func(typ string)
}

// TypeExpiring announces, a day ahead (jobs.ExpiringNotice), that a job
// and its results will be deleted when its retention ends.
const TypeExpiring = "job.expiring"

// sweepExpiring enqueues the job.expiring events that are due.
func (s *Sweeper) sweepExpiring(ctx context.Context) (int, error) {
	n := 0
	for {
		ids, err := s.Store.ExpiringDue(ctx, s.Now(), 500)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		js, err := s.Store.GetMany(ctx, ids)
		if err != nil {
			return n, err
		}
		for i, j := range js {
			if j != nil && j.WebhookURL != "" {
				e, ok, err := s.Events.Build(j, false, s.Now())
				if err != nil {
					return n, err
				}
				if ok {
					e.EventID, e.Type = EventID(j.ID, TypeExpiring), TypeExpiring
					exp := j.ExpiresAt.UTC()
					e.ExpiresAt = &exp
					body, err := json.Marshal(e)
					if err != nil {
						return n, err
					}
					added, err := s.Queue.Enqueue(ctx, Queued{ID: e.EventID, Type: e.Type, JobID: j.ID, AccountID: j.AccountID, URL: j.WebhookURL, Body: body},
						s.Now(), s.MaxAge)
					if err != nil {
						return n, err
					}
					if added {
						n++
						if s.Enqueued != nil {
							s.Enqueued(e.Type)
						}
					}
				}
			}
			if err := s.Store.DoneExpiring(ctx, ids[i]); err != nil {
				return n, err
			}
		}
	}
}

// Sweep looks at every job that may owe an event once and enqueues what it
// owes. It returns how many events it enqueued.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	n, err := s.sweepJobs(ctx)
	m, err2 := s.sweepExpiring(ctx)
	return n + m, errors.Join(err, err2)
}

func (s *Sweeper) sweepJobs(ctx context.Context) (int, error) {
	const batch = 500
	n := 0
	var errs []error
	for start := 0; ; start += batch {
		ids, err := s.Store.WebhookJobs(ctx, start, batch)
		if err != nil {
			return n, err
		}
		if len(ids) == 0 {
			break
		}
		// A cheap read of every watched job; the whole job only of those
		// that owe an event now.
		states, err := s.Store.WebhookStates(ctx, ids)
		if err != nil {
			return n, err
		}
		var owing []string
		for i, st := range states {
			if !st.Exists || st.URL == "" || st.Owes() {
				owing = append(owing, ids[i])
			}
		}
		js, err := s.Store.GetMany(ctx, owing)
		if err != nil {
			return n, err
		}
		dropped := 0
		for i, j := range js {
			k, gone, err := s.one(ctx, owing[i], j)
			n += k
			if err != nil {
				errs = append(errs, err)
			}
			if gone {
				dropped++
			}
		}
		if len(ids) < batch {
			break
		}
		start -= dropped // the set shrank under us
	}
	return n, errors.Join(errs...)
}

// one enqueues what job id owes; gone reports that it left the set.
func (s *Sweeper) one(ctx context.Context, id string, j *jobs.Job) (n int, gone bool, err error) {
	if j == nil || j.WebhookURL == "" { // expired, deleted (a rolled-back submission), or never had one
		return 0, true, s.Store.UnwatchWebhook(ctx, id)
	}
	if !j.WebhookRetryingAt.IsZero() && !j.WebhookRetryingSent {
		added, err := s.enqueue(ctx, j, true, j.WebhookRetryingAt)
		if err != nil {
			return n, false, err
		}
		n += added
		if err := s.Store.MarkWebhookRetryingSent(ctx, j.ID); err != nil {
			return n, false, err
		}
	}
	if j.Status != jobs.StatusCompleted {
		return n, false, nil
	}
	added, err := s.enqueue(ctx, j, false, j.CompletedAt)
	if err != nil {
		return n, false, err
	}
	return n + added, true, s.Store.UnwatchWebhook(ctx, j.ID)
}

// enqueue enqueues j's completion event, or with retrying its retrying
// event (when its family announces one); it returns how many it added.
func (s *Sweeper) enqueue(ctx context.Context, j *jobs.Job, retrying bool, at time.Time) (int, error) {
	if at.IsZero() {
		at = s.Now()
	}
	e, ok, err := s.Events.Build(j, retrying, at)
	if err != nil || !ok {
		return 0, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	added, err := s.Queue.Enqueue(ctx, Queued{ID: e.EventID, Type: e.Type, JobID: j.ID, AccountID: j.AccountID, URL: j.WebhookURL, Body: body},
		s.Now(), s.MaxAge)
	if err != nil || !added {
		return 0, err
	}
	s.Log.Info("webhook event enqueued", "event", e.EventID, "type", e.Type, "job", j.ID, "account", j.AccountID)
	if s.Enqueued != nil {
		s.Enqueued(e.Type)
	}
	return 1, nil
}
