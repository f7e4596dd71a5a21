package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Bulk mounts one family's bulk endpoints: POST Path, GET Path/{job_id} and
// GET Path/{job_id}/results. The handlers are the same for every family;
// what differs is the family's (decode, price, answers, rendering) and the
// mount's (which keys, how it is paid for).
type Bulk struct {
	Path   string // e.g. "/company-enrichment/bulk", under /v1
	Family family.Family
	// Keys is which keys the endpoints take, and so how a submission is
	// paid for: the family's Metering on pay-as-you-go mounts, one search
	// per distinct input from the daily bulk search quota on
	// unlimited-plan mounts (SPEC 4.3, section 8).
	Keys KeyKind
}

func (s *Server) mountBulk(g chi.Router, b Bulk) {
	g.With(s.idempotent).Post(b.Path, s.submitBulk(b))
	g.Get(b.Path+"/{job_id}", s.getBulkJob(b))
	g.Get(b.Path+"/{job_id}/results", s.getBulkResults(b))
	g.Delete(b.Path+"/{job_id}", s.deleteBulkJob(b))
}

func (s *Server) submitBulk(m Bulk) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		// Sized from the body's length (about 24 bytes a row at the least,
		// capped at the family's row limit): growing the row slices and the
		// dedupe map while a 100,000-row body streams in was a third of
		// the decode.
		hint := 0
		if r.ContentLength > 0 {
			hint = int(min(r.ContentLength/24, int64(m.Family.Form().MaxRows)))
		}
		b, met, e := s.decodeBulk(r.Context(), p, m, http.MaxBytesReader(w, r.Body, s.MaxBodyBytes), hint)
		if e != nil {
			apierr.Write(w, e)
			return
		}
		id, prior, ok := s.idemSubmission(w, r, p.Account.ID, p.Key.ID)
		if !ok {
			return
		}
		if prior != nil {
			// The first request with this key committed this job and
			// died before answering: its answer, charged once.
			markKept(r)
			w.Header().Set(replayedHeader, "true")
			writeJSON(w, http.StatusOK, m.Family.Submitted(prior))
			return
		}
		b.ID = id
		if c, _ := r.Context().Value(idemClaimKey{}).(*idemClaim); c != nil {
			b.IdemKey = c.rk // deleting the job deletes the record that replays it
		}
		j, err := s.Jobs.Submit(r.Context(), p, b, met)
		if s.chargeFailed(w, r, err) {
			return
		}
		s.Metrics.CreditsCharged.Add(float64(j.Charge) / credits.Scale)
		markKept(r) // a job: its answer is replayed, never a second job
		writeJSON(w, http.StatusOK, m.Family.Submitted(j))
	}
}

// decodeBulk decodes a submission body with m's family and says how p
// pays for it: the submission's first two steps, shared by the API's
// handler and the dashboard (SubmitAs, dashboard.go). Nothing is charged.
func (s *Server) decodeBulk(ctx context.Context, p *accounts.Principal, m Bulk, body io.Reader, hint int) (*jobs.Builder, jobs.Metering, *apierr.Error) {
	b := jobs.NewBuilder(m.Family.Name(), hint)
	sub, e := family.Decode(m.Family, body, b)
	if e != nil {
		return nil, jobs.Metering{}, e
	}
	if e := checkWebhook(ctx, s.Webhooks, sub, b); e != nil { // the optional webhook_url (webhook.go)
		return nil, jobs.Metering{}, e
	}
	if err := s.Suppress.Apply(ctx, m.Family, b); err != nil {
		// Fail closed: a person who asked to be forgotten is not
		// processed because the list could not be read.
		s.Logger.Error("suppression list unavailable", "err", err)
		return nil, jobs.Metering{}, apierr.New(http.StatusServiceUnavailable, "The service is temporarily unavailable; try again.")
	}
	met := m.Family.Metering()
	if m.Keys == UnlimitedPlan {
		met = s.bulkSearches(p, family.WordsOf(m.Family).BulkQuota)
	}
	return b, met, nil
}

func (s *Server) getBulkJob(m Bulk) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := jobIDParam(w, r, m.Family)
		if !ok {
			return
		}
		j, err := s.Jobs.Get(r.Context(), PrincipalFrom(r.Context()).Key.ID, id)
		if s.jobReadFailed(w, r, j, m.Family.Name(), err) {
			return
		}
		writeJSON(w, http.StatusOK, m.Family.Status(j))
	}
}

// deletedJob is the answer to DELETE .../{job_id} (docs/privacy.md).
type deletedJob struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"` // always "deleted"
	// PreviousStatus is the job's status when it was stopped, in its
	// family's words (running, in_progress, completed, ...).
	PreviousStatus string `json:"previous_status"`
	TotalRows      int64  `json:"total_rows"`      // rows removed
	TotalProcessed int64  `json:"total_processed"` // rows that had an answer
	// Unprocessed is the distinct inputs that were never answered.
	Unprocessed     int64   `json:"unprocessed_inputs"`
	CreditsRefunded float64 `json:"credits_refunded"`
	// Removed names what is gone: every trace of the job.
	Removed []string `json:"removed"`
}

// RemovedTraces is what a deletion removes, in the answer's words (the
// API's DELETE answer and the dashboard's page after a deletion).
var RemovedTraces = []string{"status", "rows", "results", "inputs", "cached_results", "idempotency_record", "webhook_events"}

func (s *Server) deleteBulkJob(m Bulk) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := jobIDParam(w, r, m.Family)
		if !ok {
			return
		}
		d, err := s.Jobs.Delete(r.Context(), PrincipalFrom(r.Context()).Key.ID, m.Family.Name(), id)
		if errors.Is(err, jobs.ErrJobNotFound) {
			apierr.Write(w, apierr.ErrJobNotFound)
			return
		}
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, deletedJob{JobID: id, Status: "deleted", PreviousStatus: familyStatus(m.Family, d.Job),
			TotalRows: d.Job.TotalRows, TotalProcessed: family.Processed(m.Family, d.Job), Unprocessed: d.Unprocessed,
			CreditsRefunded: float64(d.Refunded) / credits.Scale, Removed: RemovedTraces})
	}
}

// familyStatus is the status field of j's status answer in its family's
// vocabulary (each family names its statuses).
func familyStatus(f family.Family, j *jobs.Job) string {
	raw, err := json.Marshal(f.Status(j))
	if err != nil {
		return j.Status
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(raw, &st) != nil || st.Status == "" {
		return j.Status
	}
	return st.Status
}

func (s *Server) getBulkResults(m Bulk) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := jobIDParam(w, r, m.Family)
		if !ok {
			return
		}
		format, e := resultsFormat(r)
		if e != nil {
			apierr.Write(w, e)
			return
		}
		limit, offset, e := pageParams(r)
		if e != nil {
			apierr.Write(w, e)
			return
		}
		if format == "csv" {
			limit = csvPage
		}
		// No job has more than MaxRows rows, so every offset past that reads
		// the same empty page; clamping keeps offset+limit from overflowing
		// in the row arithmetic. The answer echoes the offset asked.
		res, err := s.Jobs.Results(r.Context(), PrincipalFrom(r.Context()).Key.ID, id, min(offset, m.Family.Form().MaxRows), limit, m.Family)
		var j *jobs.Job
		if res != nil {
			defer res.Release()
			j = res.Job
		}
		if s.jobReadFailed(w, r, j, m.Family.Name(), err) {
			return
		}
		if e := m.Family.ResultsReady(j); e != nil {
			apierr.Write(w, e)
			return
		}
		if format == "csv" {
			s.writeResultsCSV(w, r, m.Family, res, min(offset, m.Family.Form().MaxRows))
			return
		}
		writeResultsPage(w, res, family.Processed(m.Family, j), limit, offset)
	}
}

// jobIDParam validates the job_id path parameter; what a malformed one is
// answered with is the family's (422 or 400).
func jobIDParam(w http.ResponseWriter, r *http.Request, f family.Family) (string, bool) {
	raw := chi.URLParam(r, "job_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		apierr.Write(w, f.BadJobID())
		return "", false
	}
	return id.String(), true
}

// pageParams validates limit (1..500, default 50) and offset (>= 0).
func pageParams(r *http.Request) (limit, offset int, e *apierr.Error) {
	var v apierr.Validation
	limit, offset = 50, 0
	q := r.URL.Query()
	if s := q.Get("limit"); q.Has("limit") {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			v.Add("query.limit", apierr.TypeIntParsing, "Input should be a valid integer")
		case n < 1:
			v.Add("query.limit", apierr.TypeGreaterThanEqual, "Input should be greater than or equal to 1")
		case n > 500:
			v.Add("query.limit", apierr.TypeLessThanEqual, "Input should be less than or equal to 500")
		default:
			limit = n
		}
	}
	if s := q.Get("offset"); q.Has("offset") {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			v.Add("query.offset", apierr.TypeIntParsing, "Input should be a valid integer")
		case n < 0:
			v.Add("query.offset", apierr.TypeGreaterThanEqual, "Input should be greater than or equal to 0")
		default:
			offset = n
		}
	}
	return limit, offset, v.Err()
}

// jobReadFailed answers a job read that failed: 404 for an unknown job,
// another key's, or one of another family (each family's endpoints know
// only their own jobs), 500 for anything else. It reports whether it
// answered.
func (s *Server) jobReadFailed(w http.ResponseWriter, r *http.Request, j *jobs.Job, family string, err error) bool {
	switch {
	case errors.Is(err, jobs.ErrJobNotFound) || (err == nil && j.Family != family):
		apierr.Write(w, apierr.ErrJobNotFound)
	case err != nil:
		s.internalError(w, r, err)
	default:
		return false
	}
	return true
}

// writeResultsPage writes a results page (SPEC 2.4, 4.x): the page fields
// and the rendered rows, with Content-Length, without copying the rows
// again (a cached page is written straight from the cache).
func writeResultsPage(w http.ResponseWriter, res *jobs.Results, processed int64, limit, offset int) {
	var head [256]byte
	h := fmt.Appendf(head[:0], `{"job_id":"%s","total_rows":%d,"total_processed":%d,"limit":%d,"offset":%d,"results":[`,
		res.Job.ID, res.Job.TotalRows, processed, limit, offset)
	const tail = "]}\n"
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(h)+res.Len()+len(tail)))
	if _, err := w.Write(h); err != nil {
		return
	}
	if _, err := res.WriteTo(w); err != nil {
		return
	}
	_, _ = io.WriteString(w, tail)
}

// bulkSearches is the metering of unlimited-plan bulk submissions: one
// search per unique row from the account's daily bulk search quota (the
// UTC day of the server's clock), whatever key or replica submits; label
// is how the family names that quota (family.Words.BulkQuota).
func (s *Server) bulkSearches(p *accounts.Principal, label string) jobs.Metering {
	w := billing.DailyWindow(billing.BulkSearches, s.Now())
	w.Label = label
	return jobs.Metering{Quota: &jobs.Quota{Window: w, Limit: s.Plans[p.Account.Plan].DailyBulkSearches}}
}

// quotaExceeded is the 429 of a refused quota consumption (SPEC section
// 7): bulk_searches_limited for the plan's daily quota of bulk inputs,
// monthly_quota_exceeded for its monthly cap of single requests, each
// named in the words of the family whose mount draws on it (the window's
// Label); Retry-After is the whole seconds until the window resets
// (rounded up, at least 1).
func quotaExceeded(qe *billing.QuotaError) *apierr.Error {
	wait := int((qe.RetryAfter + time.Second - 1) / time.Second)
	wait = max(wait, 1)
	label := qe.Window.Label
	if label == "" {
		label = strings.ReplaceAll(qe.Window.Name, "_", " ") + " quota"
	}
	var e *apierr.Error
	switch qe.Window.Name {
	case billing.BulkSearches:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeBulkSearchesLimited, fmt.Sprintf(
			"Daily %s exceeded: %d of %d used today, this submission needs %d. Nothing was consumed; "+
				"the quota resets at %s (UTC midnight).", label, qe.Used, qe.Limit, qe.Requested, qe.Window.Reset.UTC().Format(time.RFC3339)))
	default:
		e = apierr.WithCode(http.StatusTooManyRequests, apierr.CodeMonthlyQuotaExceeded, fmt.Sprintf(
			"Monthly %s reached: %d of %d used in this billing period, which ends at %s.",
			label, qe.Used, qe.Limit, qe.Window.Reset.UTC().Format(time.RFC3339)))
	}
	e.RetryAfter = wait
	return e
}
