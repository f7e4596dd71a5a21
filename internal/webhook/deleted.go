package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// TypeDeleted announces that a job was deleted (by its owner, or erased):
// its status and results answer 404 from then on.
const TypeDeleted = "job.deleted"

// JobDeleted is the engine's Deleted hook (jobs.Engine.DeleteJob): the
// job's events still queued or kept are removed (their payloads are the
// job's counts and links, and a deleted job leaves no trace), then, for a
// job with a webhook, the job.deleted event is enqueued, signed and
// delivered like the others. Failures are logged: the job is gone either
// way, and its old events expire with the queue's records.
func (s *Service) JobDeleted(ctx context.Context, d *jobs.Deletion) {
	if err := s.jobDeleted(ctx, d); err != nil {
		s.Log.Error("webhook: job deleted", "job", d.Job.ID, "err", err)
	}
}

func (s *Service) jobDeleted(ctx context.Context, d *jobs.Deletion) error {
	sw := s.Sweeper
	j := d.Job
	ids := []string{EventID(j.ID, TypeCompleted), EventID(j.ID, TypeExpiring)}
	m, ok := sw.Events.mount(j)
	if ok {
		if st, ok := family.RetryingStatus(m.Family); ok {
			ids = append(ids, EventID(j.ID, typePrefix+st))
		}
	}
	if err := sw.Queue.Forget(ctx, ids...); err != nil {
		return err
	}
	if j.WebhookURL == "" || !ok {
		return nil
	}
	e, _, err := sw.Events.Build(j, false, d.At)
	if err != nil {
		return err
	}
	e.EventID, e.Type, e.Status = EventID(j.ID, TypeDeleted), TypeDeleted, "deleted"
	refunded := float64(d.Refunded) / credits.Scale
	e.CreditsRefunded = &refunded
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	added, err := sw.Queue.Enqueue(ctx, Queued{ID: e.EventID, Type: e.Type, JobID: j.ID, AccountID: j.AccountID, URL: j.WebhookURL, Body: body},
		sw.Now(), sw.MaxAge)
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", TypeDeleted, err)
	}
	if added && sw.Enqueued != nil {
		sw.Enqueued(e.Type)
	}
	return nil
}
