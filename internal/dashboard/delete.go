package dashboard

// Deleting a job from its page (docs/privacy.md): a confirmation page, then
// a POST (Origin and CSRF checked like every form) that calls the engine's
// own deletion, the one DELETE /v1/.../{job_id} calls: the job is stopped,
// its unprocessed inputs refunded exactly (with their ledger entry), every
// trace of it removed, the job.deleted webhook sent and the audit log told
// which dashboard user asked.

import (
	"net/http"

	"github.com/bulkd/bulkd/apiserver"
)

// deletedData is the page after a deletion: what was removed and refunded.
type deletedData struct {
	Job         jobView
	Unprocessed int64
	Refunded    string // credits, e.g. "1.4"
	QuotaUnits  int64  // a job paid with bulk searches: nothing in credits
	Removed     []string
}

func (d *Dashboard) deleteJobForm(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobOf(w, r)
	if !ok {
		return
	}
	d.render(w, r, http.StatusOK, "deletejob", view{Title: "Delete job", Nav: "jobs", Data: d.view(j)})
}

func (d *Dashboard) deleteJob(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobOf(w, r)
	if !ok {
		return
	}
	before := d.view(j)
	u := sessionFrom(r.Context()).User
	del, err := d.Jobs.DeleteJobBy(r.Context(), j, "deleted by its owner", "dashboard:user:"+u.ID)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.Logger.Info("dashboard job deleted", "user", u.ID, "job", j.ID)
	data := deletedData{Job: before, Unprocessed: del.Unprocessed, Refunded: del.Refunded.String(),
		QuotaUnits: j.QuotaUnits, Removed: apiserver.RemovedTraces}
	d.render(w, r, http.StatusOK, "deleted", view{Title: "Job deleted", Nav: "jobs", Data: data,
		Notice: "The job is deleted: it is stopped and everything it stored is gone."})
}
