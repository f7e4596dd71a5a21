package apiserver

import (
	"bytes"
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

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Company enrichment limits (SPEC 2.1, 4.1, section 8).
const (
	companyMaxRows     = 100_000
	companyMaxValueLen = 2048
	maxReportedErrors  = 50
)

// companyPrice is 1 credit per distinct input.
var companyPrice = credits.Whole(1)

// CompanyDeps are what the company endpoints need.
type CompanyDeps struct {
	Normalizer *normalize.Normalizer
	Answerer   *enrich.Answerer
}

// decodeCompanyBulk reads {"input": [{network_url, domain}, ...]} token by
// token from the body and classifies each row as it arrives, so a 100,000
// row body is never held as a second copy. It returns a 422 only in the
// cases SPEC 4.1 lists (and for JSON of the wrong shape); invalid rows are
// added to b as skipped.
func decodeCompanyBulk(r io.Reader, n *normalize.Normalizer, b *jobs.Builder) *apierr.Error {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return tokenError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return apierr.Unprocessable(apierr.Item{Loc: "body", Type: apierr.TypeObjectType, Msg: "Input should be a JSON object"})
	}
	var v apierr.Validation
	sawInput := false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return tokenError(err)
		}
		key, _ := kt.(string)
		if key != "input" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return tokenError(err)
			}
			continue
		}
		if sawInput {
			// Reading both lists would let one body carry more than the
			// row limit, and picking one would run rows the client may not
			// have meant: an ambiguous body is a malformed one.
			return apierr.New(http.StatusBadRequest, `Malformed JSON body: the "input" field appears more than once.`)
		}
		sawInput = true
		if e := decodeCompanyRows(dec, n, b, &v); e != nil {
			return e
		}
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return tokenError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: unexpected data after the JSON value.")
	}
	if !sawInput {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeMissing, Msg: "Field required"})
	}
	if !v.Empty() {
		return v.Err()
	}
	if b.Rows() == 0 {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeTooShort, Msg: "List should have at least 1 item after validation, not 0"})
	}
	if b.Distinct() == 0 {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeValueError,
			Msg: fmt.Sprintf("No valid row: all %d rows are invalid", b.Rows())})
	}
	return nil
}

type companyRow struct {
	NetworkURL *string `json:"network_url"`
	Domain     *string `json:"domain"`
}

func decodeCompanyRows(dec *json.Decoder, n *normalize.Normalizer, b *jobs.Builder, v *apierr.Validation) *apierr.Error {
	tok, err := dec.Token()
	if err != nil {
		return tokenError(err)
	}
	if tok == nil {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeListType, Msg: "Input should be a valid list"})
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeListType, Msg: "Input should be a valid list"})
	}
	i := 0
	for dec.More() {
		if i == companyMaxRows {
			return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeTooLong,
				Msg: fmt.Sprintf("List should have at most %d items", companyMaxRows)})
		}
		// One typed decode per row: the decoder scans the row once. A value
		// of the wrong type comes back as an UnmarshalTypeError naming the
		// field (or none when the row is not an object), and the decoder has
		// moved past the row either way.
		var row companyRow
		if err := dec.Decode(&row); err != nil {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				return tokenError(err)
			}
			if len(v.Items) < maxReportedErrors {
				if te.Field == "" || strings.Contains(te.Field, ".") {
					v.Add(apierr.Loc("body", "input", i), apierr.TypeObjectType, "Input should be a valid object")
				} else {
					v.Add(apierr.Loc("body", "input", i, te.Field), apierr.TypeStringType, "Input should be a valid string")
				}
			}
			i++
			continue
		}
		ok1 := checkLength(row.NetworkURL, i, "network_url", v)
		ok2 := checkLength(row.Domain, i, "domain", v)
		nu, dm := row.NetworkURL, row.Domain
		if ok1 && ok2 && v.Empty() {
			echo, in, reason := enrich.Classify(n, nu, dm)
			if reason != "" {
				b.AddInvalid(echo, reason)
			} else {
				b.AddValid(echo, in.Key, in.Key)
			}
		}
		i++
	}
	if _, err := dec.Token(); err != nil { // closing bracket
		return tokenError(err)
	}
	return nil
}

// checkLength records a value over the length limit; the location is
// only built when there is a problem to report.
func checkLength(val *string, row int, field string, v *apierr.Validation) bool {
	if val == nil || !overChars(*val, companyMaxValueLen) {
		return true
	}
	if len(v.Items) < maxReportedErrors {
		v.Add(apierr.Loc("body", "input", row, field), apierr.TypeStringTooLong,
			fmt.Sprintf("String should have at most %d characters", companyMaxValueLen))
	}
	return false
}

func tokenError(err error) *apierr.Error {
	if e := tooLarge(err); e != nil {
		return e
	}
	return jsonError(err)
}

// CompanySubmitResponse is SPEC 2.2.
type CompanySubmitResponse struct {
	JobID           string         `json:"job_id"`
	Status          string         `json:"status"`
	TotalRows       int64          `json:"total_rows"`
	TotalInvalid    int64          `json:"total_invalid"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

func (s *Server) submitCompanyBulk(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	b := jobs.NewBuilder(enrich.Family, 0)
	body := http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
	if e := decodeCompanyBulk(body, s.Company.Normalizer, b); e != nil {
		apierr.Write(w, e)
		return
	}
	j, err := s.Jobs.Submit(r.Context(), p, b, jobs.Metering{Price: companyPrice})
	if s.chargeFailed(w, r, err) {
		return
	}
	s.Metrics.CreditsCharged.Add(float64(j.Charge) / credits.Scale)
	writeJSON(w, http.StatusOK, CompanySubmitResponse{JobID: j.ID, Status: "submitted", TotalRows: j.TotalRows,
		TotalInvalid: j.TotalInvalid, CreditsConsumed: j.Charge})
}

// chargeFailed counts a charge (a submission's or a single lookup's) by
// outcome and answers a failed one: 403 when the account cannot pay, 500
// otherwise (a submission has reversed its charge by then). It reports
// whether it answered.
func (s *Server) chargeFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		s.Metrics.ChargesByOutcome.WithLabelValues("ok").Inc()
		return false
	}
	var ie *billing.InsufficientError
	if errors.As(err, &ie) {
		s.Metrics.ChargesByOutcome.WithLabelValues("insufficient").Inc()
		apierr.Write(w, apierr.New(http.StatusForbidden, ie.Error()))
		return true
	}
	s.Metrics.ChargesByOutcome.WithLabelValues("failed").Inc()
	s.internalError(w, r, err)
	return true
}

// JobStatus is the status answer shared by the bulk families. SPEC leaves
// the company and verification status fields to us; docs/api.md.
type JobStatus struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	TotalInvalid    int64            `json:"total_invalid"`
	TotalDistinct   int64            `json:"total_distinct"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	Summary         map[string]int64 `json:"summary"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

func (s *Server) companyJob(w http.ResponseWriter, r *http.Request) (*jobs.Job, bool) {
	id, ok := jobIDParam(w, r)
	if !ok {
		return nil, false
	}
	j, err := s.Jobs.Get(r.Context(), PrincipalFrom(r.Context()).Key.ID, id)
	if s.jobReadFailed(w, r, j, enrich.Family, err) {
		return nil, false
	}
	return j, true
}

// jobIDParam validates the job_id path parameter: not a uuid is 422 for the
// families that say "invalid parameters give 422".
func jobIDParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := chi.URLParam(r, "job_id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		apierr.Write(w, apierr.Unprocessable(apierr.Item{Loc: "path.job_id", Type: apierr.TypeUUIDParsing,
			Msg: "Input should be a valid UUID"}))
		return "", false
	}
	return id.String(), true
}

func companySummary(j *jobs.Job) map[string]int64 {
	return map[string]int64{
		"total_found":       j.Outcomes[jobs.OutcomeFound],
		"total_not_found":   j.Outcomes[jobs.OutcomeNotFound],
		"total_error":       j.Outcomes[jobs.OutcomeError],
		"total_invalid_url": j.TotalInvalid,
		"total_pending":     j.Pending(),
	}
}

func statusOf(j *jobs.Job, summary map[string]int64) JobStatus {
	st := JobStatus{JobID: j.ID, Status: j.Status, TotalRows: j.TotalRows, TotalProcessed: j.RowsProcessed,
		TotalInvalid: j.TotalInvalid, TotalDistinct: j.Distinct, CreditsConsumed: j.Charge, Summary: summary,
		CreatedAt: j.CreatedAt}
	if !j.CompletedAt.IsZero() {
		c := j.CompletedAt
		st.CompletedAt = &c
	}
	return st
}

func (s *Server) getCompanyJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.companyJob(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, statusOf(j, companySummary(j)))
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

func (s *Server) getCompanyResults(w http.ResponseWriter, r *http.Request) {
	id, ok := jobIDParam(w, r)
	if !ok {
		return
	}
	limit, offset, e := pageParams(r)
	if e != nil {
		apierr.Write(w, e)
		return
	}
	// No job has more than companyMaxRows rows, so every offset past that
	// reads the same empty page; clamping keeps offset+limit from
	// overflowing in the row arithmetic. The answer echoes the offset asked.
	price := companyPrice.String()
	render := func(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer) { enrich.RenderRow(buf, row, ans, price) }
	res, err := s.Jobs.Results(r.Context(), PrincipalFrom(r.Context()).Key.ID, id, min(offset, companyMaxRows), limit, render)
	var j *jobs.Job
	if res != nil {
		defer res.Release()
		j = res.Job
	}
	if s.jobReadFailed(w, r, j, enrich.Family, err) {
		return
	}
	writeResultsPage(w, res, limit, offset)
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
func writeResultsPage(w http.ResponseWriter, res *jobs.Results, limit, offset int) {
	var head [256]byte
	h := fmt.Appendf(head[:0], `{"job_id":"%s","total_rows":%d,"total_processed":%d,"limit":%d,"offset":%d,"results":[`,
		res.Job.ID, res.Job.TotalRows, res.Job.RowsProcessed, limit, offset)
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

// getCompany is the single lookup (SPEC 4.6 leaves its shape to us): query
// network_url or domain, the same row shape as a bulk result, 1 credit for a
// valid input, nothing for an invalid one.
func (s *Server) getCompany(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	q := r.URL.Query()
	var nu, dm *string
	var v apierr.Validation
	for _, f := range []struct {
		name string
		dst  **string
	}{{"network_url", &nu}, {"domain", &dm}} {
		if !q.Has(f.name) {
			continue
		}
		val := q.Get(f.name)
		if overChars(val, companyMaxValueLen) {
			v.Add("query."+f.name, apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", companyMaxValueLen))
			continue
		}
		*f.dst = &val
	}
	if nu == nil && dm == nil && v.Empty() {
		v.Add("query.network_url", apierr.TypeMissing, "Either network_url or domain is required")
	}
	if e := v.Err(); e != nil {
		apierr.Write(w, e)
		return
	}
	echo, in, reason := enrich.Classify(s.Company.Normalizer, nu, dm)
	row := jobs.Row{Echo: echo, Index: -1, Reason: reason}
	var ans *jobs.StoredAnswer
	if reason == "" {
		row.Index, row.First = 0, true
		chargeID := "single-" + uuid.NewString()
		_, err := s.Billing.Charge(r.Context(), billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
			Amount: companyPrice, Note: "company_enrichment single"})
		if s.chargeFailed(w, r, err) {
			return
		}
		// Until the lookup has answered, every way out (an error, a panic
		// the recoverer turns into a 500) refunds the charge (SPEC 2.10:
		// a 500 refunds what it deducted).
		answered := false
		defer func() {
			if !answered {
				s.refundSingle(r.Context(), p.Account.ID, chargeID)
			}
		}()
		answers, err := s.Company.Answerer.Answer(r.Context(), []string{in.Key})
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		answered = true
		ans = &jobs.StoredAnswer{Outcome: answers[0].Outcome, Data: string(answers[0].Data)}
		s.Metrics.CreditsCharged.Add(float64(companyPrice) / credits.Scale)
	}
	var buf bytes.Buffer
	enrich.RenderRow(&buf, row, ans, companyPrice.String())
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// refundSingle reverses a single lookup's charge. It is detached from the
// request: a client that hung up mid-lookup is still refunded.
func (s *Server) refundSingle(ctx context.Context, accountID, chargeID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.Billing.Reverse(ctx, accountID, chargeID, "lookup failed"); err != nil {
		s.Logger.Error("refund failed", "charge", chargeID, "err", err)
	}
}
