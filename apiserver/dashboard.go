package apiserver

// What the account dashboard (internal/dashboard) needs from the API so
// that it charges, checks quotas, answers errors and renders results
// exactly as the API does: the same decode, metering and submission path
// as POST .../bulk (SubmitAs), the same usage numbers (Usage, account.go)
// and the same CSV (WriteJobCSV). The dashboard declares what it uses as
// its own interface (dashboard.API), which *Server satisfies.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Quote is what a submission would cost, without charging anything.
type Quote struct {
	Rows     int64 // rows submitted, duplicates and invalid rows included
	Invalid  int64
	Distinct int64 // what is charged for
	Metering jobs.Metering
	// Credits is Price x Distinct (credit-metered mounts).
	Credits credits.Amount
}

// QuoteAs decodes body as a submission of p to the bulk mount m (one of
// s.Bulk) and says what it would cost; the errors are the API's (the
// family's 4xx, 403 wrong_key_plan, 402 subscription_inactive, and
// admission control's 429 account_busy and 503 server_busy). Nothing is
// charged or stored. body is read as a stream: the caller need not hold
// it whole (the dashboard writes it from a draft as it is read).
func (s *Server) QuoteAs(ctx context.Context, p *accounts.Principal, m Bulk, body io.Reader) (*Quote, *apierr.Error) {
	b, met, release, e := s.prepareAs(ctx, p, m, body)
	defer release()
	if e != nil {
		return nil, e
	}
	q := &Quote{Rows: int64(b.Rows()), Invalid: b.Invalid(), Distinct: int64(b.Distinct()), Metering: met}
	if met.Quota == nil {
		amt, err := met.Price.Mul(q.Distinct)
		if err != nil {
			return nil, apierr.New(http.StatusUnprocessableEntity, err.Error())
		}
		q.Credits = amt
	}
	return q, nil
}

// prepareAs is the key kind and plan checks and decodeBulk of a
// submission of p to m, within the API's body limit and through its
// admission control (admitInternal), as POST /v1{m.Path}. release gives
// the body's reservation back: after the decoded rows are dropped.
func (s *Server) prepareAs(ctx context.Context, p *accounts.Principal, m Bulk, body io.Reader) (*jobs.Builder, jobs.Metering, func(), *apierr.Error) {
	if e := s.keyKindError(m.Keys, p); e != nil {
		return nil, jobs.Metering{}, func() {}, e
	}
	metered, release := s.admitInternal(ctx, p.Account.ID, "/dashboard"+m.Path, body)
	// The API's body limit, failing the same way (a *http.MaxBytesError
	// the family's decode answers as the API does).
	b, met, e := s.decodeBulk(ctx, p, m, http.MaxBytesReader(nil, io.NopCloser(metered), s.MaxBodyBytes), 0)
	return b, met, release, e
}

// SubmitAs is POST /v1{m.Path} made by p without HTTP: the same key
// kind and plan checks, admission, decode, metering, charge or quota
// check and engine submission, with the API's errors. It takes no
// Idempotency-Key (the dashboard guards against a double submission
// itself).
func (s *Server) SubmitAs(ctx context.Context, p *accounts.Principal, m Bulk, body io.Reader) (*jobs.Job, *apierr.Error) {
	b, met, release, e := s.prepareAs(ctx, p, m, body)
	defer release()
	if e != nil {
		return nil, e
	}
	j, err := s.Jobs.Submit(ctx, p, b, met)
	if e := s.chargeError(ctx, err); e != nil {
		return nil, e
	}
	s.Metrics.CreditsCharged.Add(float64(j.Charge) / credits.Scale)
	return j, nil
}

// Mounts are the bulk endpoints, in the order they are mounted.
func (s *Server) Mounts() []Bulk { return s.Bulk }

// FamilyOf returns the family of a job.
func (s *Server) FamilyOf(j *jobs.Job) (family.Family, bool) {
	for _, b := range s.Bulk {
		if b.Family.Name() == j.Family {
			return b.Family, true
		}
	}
	return nil, false
}

// readyResults reads rows [offset, offset+limit) of job j (already
// checked to be the caller's) with its family, as GET .../results does: a
// family whose results are not ready yet (email verification in progress)
// answers its error. The caller releases the page.
func (s *Server) readyResults(ctx context.Context, j *jobs.Job, offset, limit int) (family.Family, *jobs.Results, *apierr.Error) {
	f, ok := s.FamilyOf(j)
	if !ok {
		return nil, nil, apierr.ErrJobNotFound
	}
	res, err := s.Jobs.Results(ctx, j.KeyID, j.ID, min(offset, f.Form().MaxRows), limit, f)
	if err != nil {
		return nil, nil, s.internalAPIError(ctx, err)
	}
	if e := f.ResultsReady(res.Job); e != nil {
		res.Release()
		return nil, nil, e
	}
	return f, res, nil
}

// ResultCells reads rows [offset, offset+limit) of job j (already checked
// to be the caller's) as the cells of its CSV download: the columns and
// one record per row, or readyResults' error.
func (s *Server) ResultCells(ctx context.Context, j *jobs.Job, offset, limit int) ([]string, [][]string, *apierr.Error) {
	f, res, e := s.readyResults(ctx, j, offset, limit)
	if e != nil {
		return nil, nil, e
	}
	defer res.Release()
	var buf bytes.Buffer
	rows, err := decodeRows(&buf, res)
	if err != nil {
		return nil, nil, s.internalAPIError(ctx, fmt.Errorf("rendered rows of job %s: %w", j.ID, err))
	}
	cols := f.CSVColumns()
	out := make([][]string, len(rows))
	for i, row := range rows {
		out[i] = csvRecord(make([]string, len(cols)), cols, row)
	}
	return cols, out, nil
}

// WriteJobCSV answers GET .../results?format=csv for job j (already
// checked to be the caller's): the same download, byte for byte, whoever
// made the job. An error before the first byte is returned, not written.
func (s *Server) WriteJobCSV(w http.ResponseWriter, r *http.Request, j *jobs.Job) *apierr.Error {
	f, res, e := s.readyResults(r.Context(), j, 0, csvPage)
	if e != nil {
		return e
	}
	defer res.Release()
	s.writeResultsCSV(w, r, f, res, 0)
	return nil
}
