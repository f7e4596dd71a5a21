package dashboard

// New job: upload a CSV (or paste a list), pick the family and how to pay,
// map columns, review the exact cost, confirm. The confirmed job is the
// JSON body the API takes, built from the mapped columns and sent through
// apiserver.Server.SubmitAs: the same decode, dedupe, metering, charge or
// quota check and errors as POST /v1/....

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/csvsniff"
	"github.com/bulkd/bulkd/internal/dashboard/users"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/family/form"
)

// familySpec is a family as the new-job pages show it: its name and its
// form (family.Family.Form, the same one bulkctl reads).
type familySpec struct {
	Name string
	form.Form
}

// specs are the families the API mounts, each once, in mount order: the
// dashboard knows no family by name.
func (d *Dashboard) specs() []familySpec {
	var out []familySpec
	seen := map[string]bool{}
	for _, b := range d.API.Mounts() {
		if n := b.Family.Name(); !seen[n] {
			seen[n] = true
			out = append(out, familySpec{Name: n, Form: b.Family.Form()})
		}
	}
	return out
}

func (d *Dashboard) specOf(name string) (familySpec, bool) {
	for _, s := range d.specs() {
		if s.Name == name {
			return s, true
		}
	}
	return familySpec{}, false
}

// familyName is a family's label (its name when the API does not mount
// it any more).
func (d *Dashboard) familyName(name string) string {
	if s, ok := d.specOf(name); ok {
		return s.Label
	}
	return name
}

// mountFor finds the API mount of a family paid for with pay.
func (d *Dashboard) mountFor(family, pay string) (apiserver.Bulk, bool) {
	want := apiserver.Metered
	if pay == "quota" {
		want = apiserver.UnlimitedPlan
	}
	for _, b := range d.API.Mounts() {
		if b.Family.Name() == family && b.Keys == want {
			return b, true
		}
	}
	return apiserver.Bulk{}, false
}

type familyOption struct {
	familySpec
	Available bool // the API mounts the family
}

type newJobData struct {
	Families []familyOption
	// QuotaFamilies are the labels of the families the plan's quota pays
	// for (the API mounts them for unlimited keys), for the hint.
	QuotaFamilies string
	PlanActive    bool
	Family        string
	Pay           string
	Paste         string
	MaxUpload     string
}

func (d *Dashboard) newJobData(r *http.Request) (*newJobData, error) {
	a, err := d.account(r)
	if err != nil {
		return nil, err
	}
	data := &newJobData{PlanActive: a.PlanActive(d.Now()), Pay: "credits",
		MaxUpload: formatInt(d.MaxUploadBytes>>20) + " MB"}
	for _, s := range d.specs() {
		if data.Family == "" {
			data.Family = s.Name // the first is chosen at first
		}
		_, ok := d.mountFor(s.Name, "credits")
		_, q := d.mountFor(s.Name, "quota")
		data.Families = append(data.Families, familyOption{familySpec: s, Available: ok || q})
		if q {
			if data.QuotaFamilies != "" {
				data.QuotaFamilies += ", "
			}
			data.QuotaFamilies += strings.ToLower(s.Label)
		}
	}
	return data, nil
}

func (d *Dashboard) newJobForm(w http.ResponseWriter, r *http.Request) {
	data, err := d.newJobData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if f := r.URL.Query().Get("family"); f != "" {
		if _, ok := d.specOf(f); ok {
			data.Family = f
		}
	}
	d.render(w, r, http.StatusOK, "newjob", view{Title: "New job", Nav: "new", Data: data})
}

// A draft is an upload between its steps, in Redis for draftTTL in the
// account's slot.
const draftTTL = 2 * time.Hour

func draftKey(accountID, id string) string { return "bulkd:acct:{" + accountID + "}:dashdraft:" + id }

var draftID = regexp.MustCompile(`^[A-Za-z0-9_-]{20,64}$`)

type draft struct {
	ID     string
	Family string
	Pay    string
	Name   string // file name, or "pasted list"
	Data   string // the CSV text
	// HasHeader and Mapping (field -> column, form.Cells; a field absent is not
	// mapped) are the user's choice, saved by review; nil Mapping: not
	// chosen yet (the mapping page shows a guess).
	HasHeader bool
	Mapping   map[string]int
	Job       string // the job made from it
}

func (d *Dashboard) upload(w http.ResponseWriter, r *http.Request) {
	data, err := d.newJobData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	fail := func(msg string) {
		d.render(w, r, http.StatusUnprocessableEntity, "newjob", view{Title: "New job", Nav: "new", Data: data, Error: msg})
	}
	data.Family, data.Pay = r.PostFormValue("family"), r.PostFormValue("pay")
	data.Paste = r.PostFormValue("paste")
	spec, ok := d.specOf(data.Family)
	if !ok {
		fail("Choose what to run.")
		return
	}
	if data.Pay != "credits" && data.Pay != "quota" {
		fail("Choose how to pay.")
		return
	}
	if _, ok := d.mountFor(spec.Name, data.Pay); !ok {
		if data.Pay == "quota" {
			fail(spec.Label + " cannot be paid with the unlimited plan's quota; choose credits.")
		} else {
			fail(spec.Label + " is paid with the unlimited plan's quota only.")
		}
		return
	}
	var text, name string
	if f, hdr, ferr := r.FormFile("file"); ferr == nil {
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, d.MaxUploadBytes+1))
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		if int64(len(b)) > d.MaxUploadBytes {
			fail(fmt.Sprintf("The file is larger than %s; split it or use the API.", data.MaxUpload))
			return
		}
		text, name = string(b), hdr.Filename
	}
	if strings.TrimSpace(text) == "" {
		text, name = data.Paste, "pasted list"
	}
	text = strings.TrimPrefix(text, "\ufeff")
	if strings.TrimSpace(text) == "" {
		fail("Upload a CSV file or paste a list.")
		return
	}
	// Counted while parsed, holding one row at a time, and refused at the
	// first row past the family's limit (a header row aside): a draft the
	// API would refuse is never stored, and its later steps never parse a
	// million rows (issue 26, item 1).
	rows, maxRows := 0, spec.MaxRows+1
	err = scanTable(text, func([]string) error {
		if rows++; rows > maxRows {
			return errTooManyRows
		}
		return nil
	})
	switch {
	case errors.Is(err, errTooManyRows):
		fail(fmt.Sprintf("The list has more than %s rows; a job takes at most %s. Split it into smaller lists, or use the API.",
			formatInt(int64(spec.MaxRows)), formatInt(int64(spec.MaxRows))))
		return
	case err != nil:
		fail("The file could not be read as CSV: " + err.Error())
		return
	case rows == 0:
		fail("The list has no rows.")
		return
	}
	dr := &draft{ID: users.Token()[:24], Family: spec.Name, Pay: data.Pay, Name: name, Data: text}
	if err := d.createDraft(r.Context(), sessionFrom(r.Context()).User.AccountID, dr); err != nil {
		var le *accounts.LimitError
		if errors.As(err, &le) {
			e := apiserver.LimitAPIError(le)
			if e.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
			}
			d.render(w, r, limitStatus, "newjob", view{Title: "New job", Nav: "new", Data: data, Error: e.Detail})
			return
		}
		d.serverError(w, r, err)
		return
	}
	http.Redirect(w, r, Base+"/jobs/new/"+dr.ID, http.StatusSeeOther)
}

// draftFields are a draft's fields as stored: its upload, and the
// mapping once chosen.
func draftFields(dr *draft) []any {
	return append([]any{"family", dr.Family, "pay", dr.Pay, "name", dr.Name, "data", dr.Data}, mappingFields(dr)...)
}

// mappingFields are the fields of a draft's chosen mapping (none before
// it is chosen).
func mappingFields(dr *draft) []any {
	if dr.Mapping == nil {
		return nil
	}
	m, _ := json.Marshal(dr.Mapping)
	return []any{"header", strconv.FormatBool(dr.HasHeader), "map", string(m)}
}

// updateDraftScript saves a draft's mapping and renews its expiry, and its
// entry among the account's drafts (drafts.go) with it, if the draft still
// exists (an expired one is not brought back half). KEYS = the draft's
// hash, drafts zset, bytes hash. ARGV = draft id, expires ms, field-value
// pairs. Returns 1, or 0 when the draft is gone.
var updateDraftScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #ARGV > 2 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
  redis.call('PEXPIREAT', KEYS[3], ARGV[2])
end
return 1
`)

// saveDraft saves a reviewed draft's mapping (its upload was stored by
// createDraft and is not sent again).
func (d *Dashboard) saveDraft(r *http.Request, dr *draft) error {
	acct := sessionFrom(r.Context()).User.AccountID
	// Without the upload: family, pay, name and data never change.
	fields := append([]any{dr.ID, d.Now().Add(draftTTL).UnixMilli()}, mappingFields(dr)...)
	n, err := updateDraftScript.Run(r.Context(), d.Redis, []string{draftKey(acct, dr.ID), draftsKey(acct), draftBytesKey(acct)}, fields...).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errNoDraft
	}
	return nil
}

var errNoDraft = errors.New("no such draft")

func (d *Dashboard) loadDraft(r *http.Request) (*draft, error) {
	id := chi.URLParam(r, "draft")
	if !draftID.MatchString(id) {
		return nil, errNoDraft
	}
	m, err := d.Redis.HGetAll(r.Context(), draftKey(sessionFrom(r.Context()).User.AccountID, id)).Result()
	if err != nil {
		return nil, err
	}
	if m["family"] == "" {
		return nil, errNoDraft
	}
	dr := &draft{ID: id, Family: m["family"], Pay: m["pay"], Name: m["name"], Data: m["data"], HasHeader: m["header"] == "true",
		Job: m["job"]}
	if v, ok := m["map"]; ok {
		dr.Mapping = map[string]int{}
		_ = json.Unmarshal([]byte(v), &dr.Mapping)
	}
	return dr, nil
}

func (d *Dashboard) draftMissing(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errNoDraft) {
		d.errorPage(w, r, http.StatusNotFound, "Upload not found",
			"This upload has expired (uploads are kept for 2 hours) or was never made. Start a new job.")
		return
	}
	d.serverError(w, r, err)
}

// scanTable calls fn with each row of CSV text (or a pasted list: one row
// a line), read with the delimiter of its first line (comma, semicolon or
// tab), cells trimmed. Rows whose cells are all empty are skipped. Only
// the current row is held, and fn's record is reused by the next row:
// fn copies what it keeps. An error of fn ends the scan with it.
func scanTable(text string, fn func(rec []string) error) error {
	first, _, _ := strings.Cut(text, "\n")
	cr := csv.NewReader(strings.NewReader(text))
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	cr.Comma = csvsniff.Comma(first)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		blank := true
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
			if rec[i] != "" {
				blank = false
			}
		}
		if !blank {
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
}

var errTooManyRows = errors.New("too many rows")

// bodyStream is the API's submission body of a draft, written as it is
// read (an io.Pipe): one row of the draft at a time is parsed, mapped
// and written as the family's form says, so neither the rows nor the
// body are ever held whole. The reader is the API's own decoding
// admission (apiserver.QuoteAs, SubmitAs): a draft of 1,000,000 rows
// stops being read at the family's row limit, and a large one is weighed
// against the account's share of the decoding budget as a POST /v1 body.
// Before (issue 26, item 1) every review built the table, the mapped rows
// and the whole JSON body first: eight reviews of a 1,000,000-row draft
// at once took 1.83 GB.
type bodyStream struct {
	*io.PipeReader
	done    chan struct{}
	preview [][]string // the first previewRows rows as they are sent; read after stop
}

// streamBody starts writing dr's submission body with its mapping. An
// empty cell is left out of its row object, unless every field is
// required and mapped (the API then says what is wrong with it).
func streamBody(spec familySpec, dr *draft) *bodyStream {
	pr, pw := io.Pipe()
	st := &bodyStream{PipeReader: pr, done: make(chan struct{})}
	keep := func(field string) bool {
		_, mapped := dr.Mapping[field]
		return mapped && spec.AllRequired
	}
	go func() {
		defer close(st.done)
		bw := bufio.NewWriterSize(pw, 32<<10)
		_, err := bw.Write(spec.BodyStart())
		header, n := dr.HasHeader, 0
		if err == nil {
			err = scanTable(dr.Data, func(row []string) error {
				if header {
					header = false
					return nil
				}
				rec := spec.Cells(row, dr.Mapping)
				if rec == nil {
					return nil
				}
				if n < previewRows {
					st.preview = append(st.preview, rec)
				}
				if n++; n > 1 {
					if err := bw.WriteByte(','); err != nil {
						return err
					}
				}
				_, err := bw.Write(spec.Item(rec, keep))
				return err
			})
		}
		if err == nil {
			_, err = bw.WriteString(form.BodyEnd)
		}
		if err == nil {
			err = bw.Flush()
		}
		// A draft that stopped being CSV halfway is a malformed body to
		// the decoder; a reader that stopped early makes err ErrClosedPipe.
		pw.CloseWithError(err)
	}()
	return st
}

// stop ends the stream (its reader may have stopped early, at the row
// limit or an error) and waits for its writer, after which preview may
// be read.
func (st *bodyStream) stop() {
	_ = st.Close()
	<-st.done
}

type column struct {
	Index int
	Label string
}

type mapField struct {
	form.Field
	Selected int // -1: none
}

type mappingData struct {
	Draft   *draft
	Spec    familySpec
	Columns []column
	Fields  []mapField
	Preview [][]string // the first rows as uploaded
	Rows    int        // data rows (after the header)
	// Over: the draft has more rows than a job takes (Rows is that
	// limit); it was not counted further.
	Over     bool
	PayLabel string
}

const previewRows = 5

func (d *Dashboard) mappingData(dr *draft) (*mappingData, error) {
	spec, _ := d.specOf(dr.Family)
	// One pass holding only the first rows: the columns, a preview and
	// the count, up to the family's limit (a draft stored before the
	// upload counted its rows may have a million).
	var head [][]string
	ncols, rows := 0, 0
	err := scanTable(dr.Data, func(rec []string) error {
		if len(head) < previewRows+1 {
			head = append(head, slices.Clone(rec))
		}
		ncols, rows = max(ncols, len(rec)), rows+1
		if rows > spec.MaxRows+1 {
			return errTooManyRows
		}
		return nil
	})
	over := errors.Is(err, errTooManyRows)
	if err != nil && !over {
		return nil, err
	}
	if dr.Mapping == nil {
		dr.HasHeader, dr.Mapping = spec.Guess(head)
	}
	md := &mappingData{Draft: dr, Spec: spec, PayLabel: payLabel(dr.Pay)}
	for i := 0; i < ncols; i++ {
		label := "Column " + strconv.Itoa(i+1)
		if len(head) > 0 && i < len(head[0]) && head[0][i] != "" {
			label += ": " + truncate(head[0][i], 40)
		}
		md.Columns = append(md.Columns, column{Index: i, Label: label})
	}
	for _, f := range spec.Fields {
		sel := -1
		if i, ok := dr.Mapping[f.Name]; ok {
			sel = i
		}
		md.Fields = append(md.Fields, mapField{Field: f, Selected: sel})
	}
	for _, hr := range head {
		row := make([]string, ncols)
		for k := range row {
			if k < len(hr) {
				row[k] = truncate(hr[k], 80)
			}
		}
		md.Preview = append(md.Preview, row)
	}
	md.Rows = rows
	if dr.HasHeader && md.Rows > 0 {
		md.Rows--
	}
	if over {
		md.Rows, md.Over = spec.MaxRows, true
	}
	return md, nil
}

func payLabel(p string) string {
	if p == "quota" {
		return "Unlimited plan (daily bulk search quota)"
	}
	return "Credits"
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// openDraft loads the upload a step works on; false when it has answered
// instead: the upload is gone, or already submitted (its job page).
func (d *Dashboard) openDraft(w http.ResponseWriter, r *http.Request) (*draft, bool) {
	dr, err := d.loadDraft(r)
	if err != nil {
		d.draftMissing(w, r, err)
		return nil, false
	}
	if dr.Job != "" {
		http.Redirect(w, r, Base+"/jobs/"+dr.Job, http.StatusSeeOther)
		return nil, false
	}
	return dr, true
}

func (d *Dashboard) mapForm(w http.ResponseWriter, r *http.Request) {
	dr, ok := d.openDraft(w, r)
	if !ok {
		return
	}
	md, err := d.mappingData(dr)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "mapping", view{Title: "Map columns", Nav: "new", Data: md})
}

type confirmData struct {
	Draft       *draft
	Spec        familySpec
	PayLabel    string
	Quote       *apiserver.Quote
	Quota       bool
	Price       string
	Cost        string
	Balance     string
	After       string
	Short       bool // the balance or quota does not cover it
	Remaining   int64
	Limit       int64
	ResetAt     time.Time
	RefundNote  string     // the family's sentence on what is refunded (family.Words)
	Preview     [][]string // the first rows as they will be sent
	PreviewMore int
}

// review saves the mapping and shows the exact cost.
func (d *Dashboard) review(w http.ResponseWriter, r *http.Request) {
	dr, ok := d.openDraft(w, r)
	if !ok {
		return
	}
	spec, _ := d.specOf(dr.Family)
	dr.HasHeader = r.PostFormValue("has_header") == "1"
	dr.Mapping = map[string]int{}
	for _, f := range spec.Fields {
		if v := r.PostFormValue("map_" + f.Name); v != "" {
			if i, err := strconv.Atoi(v); err == nil && i >= 0 && i < 1000 {
				dr.Mapping[f.Name] = i
			}
		}
	}
	if err := d.saveDraft(r, dr); err != nil {
		d.draftMissing(w, r, err)
		return
	}
	if msg := mappingProblem(spec, dr.Mapping); msg != "" {
		d.mappingError(w, r, dr, http.StatusUnprocessableEntity, msg)
		return
	}
	cd, e, err := d.confirmData(r, dr)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if e != nil {
		if e.RetryAfter > 0 { // account_busy, server_busy: the API's wait
			w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
		}
		d.mappingError(w, r, dr, e.Status, apiMessage(e))
		return
	}
	d.render(w, r, http.StatusOK, "confirm", view{Title: "Confirm job", Nav: "new", Data: cd})
}

func mappingProblem(spec familySpec, m map[string]int) string {
	if spec.AllRequired {
		for _, f := range spec.Fields {
			if _, ok := m[f.Name]; !ok {
				return "Choose a column for " + f.Label + "."
			}
		}
		return ""
	}
	if len(m) == 0 {
		return "Choose at least one column."
	}
	return ""
}

func (d *Dashboard) mappingError(w http.ResponseWriter, r *http.Request, dr *draft, status int, msg string) {
	md, err := d.mappingData(dr)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.render(w, r, status, "mapping", view{Title: "Map columns", Nav: "new", Data: md, Error: msg})
}

// apiMessage is an API error as the dashboard shows it: the detail, and
// the first validation items.
func apiMessage(e *apierr.Error) string {
	msg := e.Detail
	for i, it := range e.Errors {
		if i == 3 {
			msg += fmt.Sprintf(" (and %d more)", len(e.Errors)-3)
			break
		}
		msg += " " + it.Loc + ": " + it.Msg + "."
	}
	return msg
}

// submission is a draft as the API takes it: the principal and the
// mount (the body is streamBody's).
type submission struct {
	p       *accounts.Principal
	account *accounts.Account
	spec    familySpec
	mount   apiserver.Bulk
}

func (d *Dashboard) submission(r *http.Request, dr *draft) (*submission, error) {
	spec, ok := d.specOf(dr.Family)
	if !ok {
		return nil, errNoDraft
	}
	mount, ok := d.mountFor(dr.Family, dr.Pay)
	if !ok {
		return nil, errNoDraft
	}
	a, err := d.account(r)
	if err != nil {
		return nil, err
	}
	t := accounts.PayAsYouGo
	if dr.Pay == "quota" {
		t = accounts.Unlimited
	}
	return &submission{p: d.principal(a, t), account: a, spec: spec, mount: mount}, nil
}

func (d *Dashboard) confirmData(r *http.Request, dr *draft) (*confirmData, *apierr.Error, error) {
	sub, err := d.submission(r, dr)
	if err != nil {
		return nil, nil, err
	}
	body := streamBody(sub.spec, dr)
	q, e := d.API.QuoteAs(r.Context(), sub.p, sub.mount, body)
	body.stop()
	if e != nil {
		return nil, e, nil
	}
	a := sub.account
	cd := &confirmData{Draft: dr, Spec: sub.spec, PayLabel: payLabel(dr.Pay), Quote: q}
	if q.Metering.Quota != nil {
		u, err := d.API.Usage(r.Context(), a)
		if err != nil {
			return nil, nil, err
		}
		cd.Quota, cd.Remaining, cd.Limit, cd.ResetAt = true, u.BulkSearchesRemaining, u.BulkSearchesLimit, u.BulkSearchesResetAt
		cd.Short = q.Distinct > u.BulkSearchesRemaining
	} else {
		cd.Price, cd.Cost, cd.Balance = q.Metering.Price.String(), q.Credits.String(), a.Balance.String()
		cd.After = (a.Balance - q.Credits).String()
		cd.Short = q.Credits > a.Balance
		if q.Metering.RefundOutcome != "" {
			cd.RefundNote = family.WordsOf(sub.mount.Family).RefundSentence
		}
	}
	cd.Preview = body.preview
	cd.PreviewMore = int(q.Rows) - len(cd.Preview)
	return cd, nil, nil
}

// confirm submits the draft through the API's path. A draft makes one job
// at most: the first confirm claims it (HSETNX), so a double click or a
// resent form does not charge twice.
func (d *Dashboard) confirm(w http.ResponseWriter, r *http.Request) {
	dr, ok := d.openDraft(w, r)
	if !ok {
		return
	}
	if dr.Mapping == nil { // not reviewed yet
		http.Redirect(w, r, Base+"/jobs/new/"+dr.ID, http.StatusSeeOther)
		return
	}
	k := draftKey(sessionFrom(r.Context()).User.AccountID, dr.ID)
	claimed, err := d.Redis.HSetNX(r.Context(), k, "submitting", d.Now().UnixMilli()).Result()
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if !claimed {
		d.errorPage(w, r, http.StatusConflict, "Already submitted",
			"This upload is being submitted in another request. Its job will appear on the Jobs page.")
		return
	}
	release := func() { _ = d.Redis.HDel(r.Context(), k, "submitting").Err() }
	sub, err := d.submission(r, dr)
	if err != nil {
		release()
		d.serverError(w, r, err)
		return
	}
	body := streamBody(sub.spec, dr)
	j, e := d.API.SubmitAs(r.Context(), sub.p, sub.mount, body)
	body.stop()
	if e != nil {
		release()
		cd, e2, err := d.confirmData(r, dr)
		switch {
		case err != nil:
			d.serverError(w, r, err)
		case e2 != nil:
			d.mappingError(w, r, dr, e.Status, apiMessage(e))
		default:
			if e.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
			}
			d.render(w, r, e.Status, "confirm", view{Title: "Confirm job", Nav: "new", Data: cd, Error: apiMessage(e)})
		}
		return
	}
	if err := d.Redis.HSet(r.Context(), k, "job", j.ID).Err(); err != nil && !errors.Is(err, redis.Nil) {
		d.Logger.Warn("dashboard: recording the draft's job", "job", j.ID, "err", err)
	} else {
		// Submitted: it no longer counts among the account's drafts, and
		// its upload (now the job's rows) is not kept twice.
		d.releaseDraft(r.Context(), sessionFrom(r.Context()).User.AccountID, dr.ID)
	}
	d.Logger.Info("dashboard job submitted", "user", sessionFrom(r.Context()).User.ID, "job", j.ID, "family", j.Family,
		"charge", j.Charge.String(), "quota_units", j.QuotaUnits)
	http.Redirect(w, r, Base+"/jobs/"+j.ID+"?submitted=1", http.StatusSeeOther)
}
