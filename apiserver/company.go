package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
	if val == nil || len(*val) <= companyMaxValueLen || utf8.RuneCountInString(*val) <= companyMaxValueLen {
		return true
	}
	if len(v.Items) < maxReportedErrors {
		v.Add(apierr.Loc("body", "input", row, field), apierr.TypeStringTooLong,
			fmt.Sprintf("String should have at most %d characters", companyMaxValueLen))
	}
	return false
}

func tokenError(err error) *apierr.Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apierr.New(http.StatusBadRequest, fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit))
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
	if s.submitFailed(w, r, err) {
		return
	}
	s.Metrics.CreditsCharged.Add(float64(j.Charge) / credits.Scale)
	writeJSON(w, http.StatusOK, CompanySubmitResponse{JobID: j.ID, Status: "submitted", TotalRows: j.TotalRows,
		TotalInvalid: j.TotalInvalid, CreditsConsumed: j.Charge})
}

// submitFailed answers a failed submission: 403 when the account cannot
// pay, 500 (with the charge already reversed) otherwise.
func (s *Server) submitFailed(w http.ResponseWriter, r *http.Request, err error) bool {
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
	s.Metrics.ChargesByOutcome.WithLabelValues("refunded").Inc()
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
	if errors.Is(err, jobs.ErrJobNotFound) || (err == nil && j.Family != enrich.Family) {
		apierr.Write(w, apierr.ErrJobNotFound)
		return nil, false
	}
	if err != nil {
		s.internalError(w, r, err)
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
	page, err := s.Jobs.Page(r.Context(), PrincipalFrom(r.Context()).Key.ID, id, min(offset, companyMaxRows), limit)
	if errors.Is(err, jobs.ErrJobNotFound) || (err == nil && page.Job.Family != enrich.Family) {
		apierr.Write(w, apierr.ErrJobNotFound)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	buf := pageBuffers.Get().(*bytes.Buffer)
	defer putPageBuffer(buf)
	// Rows are their answer's data plus about 200 bytes of row fields (a
	// duplicate repeats its answer; pending and invalid rows are ~450 bytes).
	buf.Grow(256 + page.AnswerBytes + len(page.Rows)*700)
	fmt.Fprintf(buf, `{"job_id":"%s","total_rows":%d,"total_processed":%d,"limit":%d,"offset":%d,"results":[`,
		page.Job.ID, page.Job.TotalRows, page.Job.RowsProcessed, limit, offset)
	price := companyPrice.String()
	for i, row := range page.Rows {
		if i > 0 {
			buf.WriteByte(',')
		}
		var ans *jobs.StoredAnswer
		if a, ok := page.Answers[row.Index]; ok && row.Index >= 0 {
			ans = &a
		}
		enrich.RenderRow(buf, row, ans, price)
	}
	buf.WriteString("]}\n")
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

// pageBuffers recycles results-page buffers: a 500-row page is up to about
// a megabyte, and allocating (and zeroing) one per request was the largest
// cost of serving it.
var pageBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putPageBuffer(b *bytes.Buffer) {
	if b.Cap() > 8<<20 { // do not pin memory for freak pages
		return
	}
	b.Reset()
	pageBuffers.Put(b)
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
		if utf8.RuneCountInString(val) > companyMaxValueLen {
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
		if _, err := s.Billing.Charge(r.Context(), billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
			Amount: companyPrice, Note: "company_enrichment single"}); err != nil {
			var ie *billing.InsufficientError
			if errors.As(err, &ie) {
				apierr.Write(w, apierr.New(http.StatusForbidden, ie.Error()))
				return
			}
			s.internalError(w, r, err)
			return
		}
		answers, err := s.Company.Answerer.Answer(r.Context(), []string{in.Key})
		if err != nil {
			if _, rerr := s.Billing.Reverse(r.Context(), p.Account.ID, chargeID, "lookup failed"); rerr != nil {
				s.Logger.Error("refund failed", "charge", chargeID, "err", rerr)
			}
			s.internalError(w, r, err)
			return
		}
		ans = &jobs.StoredAnswer{Outcome: answers[0].Outcome, Data: string(answers[0].Data)}
		s.Metrics.CreditsCharged.Add(1)
	}
	var buf bytes.Buffer
	enrich.RenderRow(&buf, row, ans, companyPrice.String())
	buf.WriteByte('\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
