package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/errgroup"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/jobs"
)

// jobView is a job as the pages and the JSON endpoints show it.
type jobView struct {
	ID          string         `json:"id"`
	Family      string         `json:"family"`
	FamilyName  string         `json:"family_name"`
	Status      string         `json:"status"` // the API's status word for the family
	Source      string         `json:"source"` // "dashboard" or the key's prefix
	Rows        int64          `json:"total_rows"`
	Processed   int64          `json:"total_processed"`
	Invalid     int64          `json:"total_invalid"`
	Distinct    int64          `json:"total_distinct"`
	Percent     int64          `json:"percent"`
	Done        bool           `json:"done"`
	Charge      string         `json:"credits_consumed"`
	Refunded    string         `json:"credits_refunded"`
	QuotaUnits  int64          `json:"quota_units"`
	CreatedAt   time.Time      `json:"created_at"`
	CompletedAt time.Time      `json:"completed_at"`
	Outcomes    []outcomeCount `json:"outcomes"`
}

type outcomeCount struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
	// Width is the bar's length in the chart, 0..300.
	Width int64 `json:"width"`
	Y     int   `json:"-"`
	TextX int64 `json:"-"`
}

func (d *Dashboard) view(j *jobs.Job) jobView {
	v := jobView{ID: j.ID, Family: j.Family, FamilyName: d.familyName(j.Family), Status: j.Status, Rows: j.TotalRows,
		Processed: j.RowsProcessed, Invalid: j.TotalInvalid, Distinct: j.Distinct, Done: j.Status == jobs.StatusCompleted,
		Charge: j.Charge.String(), Refunded: j.Refunded.String(), QuotaUnits: j.QuotaUnits, CreatedAt: j.CreatedAt, CompletedAt: j.CompletedAt}
	var summary map[string]int64
	v.Source = "bkd_" + j.KeyID
	if j.KeyID == DashboardKeyID {
		v.Source = "dashboard"
	}
	// The family's own status answer: its status word and progress count
	// (what GET .../{job_id} says for this job).
	if f, ok := d.API.FamilyOf(j); ok {
		if b, err := json.Marshal(f.Status(j)); err == nil {
			var st struct {
				Status    string           `json:"status"`
				Processed *int64           `json:"total_processed"`
				Summary   map[string]int64 `json:"summary"`
			}
			if json.Unmarshal(b, &st) == nil {
				if st.Status != "" {
					v.Status = st.Status
				}
				if st.Processed != nil {
					v.Processed = *st.Processed
				}
				summary = st.Summary
			}
		}
	}
	// The chart shows the family's summary (as GET .../{job_id} has it),
	// or the engine's outcome counts when a family has none.
	counts := j.Outcomes
	if summary != nil {
		counts = make(map[string]int64, len(summary))
		for k, n := range summary {
			counts[strings.TrimPrefix(k, "total_")] = n
		}
	}
	v.Percent = 100
	if v.Rows > 0 {
		v.Percent = v.Processed * 100 / v.Rows
	}
	var maxN int64
	for name, n := range counts {
		if n > 0 {
			v.Outcomes = append(v.Outcomes, outcomeCount{Name: name, Count: n})
			maxN = max(maxN, n)
		}
	}
	sort.Slice(v.Outcomes, func(a, b int) bool {
		if v.Outcomes[a].Count != v.Outcomes[b].Count {
			return v.Outcomes[a].Count > v.Outcomes[b].Count
		}
		return v.Outcomes[a].Name < v.Outcomes[b].Name
	})
	for i := range v.Outcomes {
		v.Outcomes[i].Width = max(2, v.Outcomes[i].Count*300/max(maxN, 1))
		v.Outcomes[i].Y = i * 28
		v.Outcomes[i].TextX = 178 + v.Outcomes[i].Width
	}
	return v
}

type overviewData struct {
	Account    *accounts.Account
	Credits    apiserver.CreditsResponse
	Usage      apiserver.UsageResponse
	PlanActive bool
	UsedPct    int64
	Jobs       []jobView
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	// The newest jobs are read alongside the account and its usage (which
	// needs the account): two chains of round trips at once, not one
	// after the other.
	var js []*jobs.Job
	g, ctx := errgroup.WithContext(r.Context())
	g.Go(func() (err error) {
		js, err = d.Jobs.AccountJobs(ctx, sessionFrom(r.Context()).User.AccountID, 5)
		return err
	})
	a, err := d.account(r)
	var u apiserver.UsageResponse
	if err == nil {
		u, err = d.API.Usage(ctx, a)
	}
	if err = errors.Join(err, g.Wait()); err != nil {
		d.serverError(w, r, err)
		return
	}
	data := overviewData{Account: a, Credits: apiserver.Credits(a), Usage: u, PlanActive: a.PlanActive(d.Now())}
	if u.BulkSearchesLimit > 0 {
		data.UsedPct = min(100, u.BulkSearchesUsed*100/u.BulkSearchesLimit)
	}
	for _, j := range js {
		data.Jobs = append(data.Jobs, d.view(j))
	}
	d.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Data: data})
}

type keysData struct {
	Keys       []accounts.Key
	NewKey     string
	NewKeyType accounts.KeyType
	PlanActive bool
}

func (d *Dashboard) keysData(r *http.Request) (*keysData, error) {
	a, err := d.account(r)
	if err != nil {
		return nil, err
	}
	ks, err := d.Accounts.Keys(r.Context(), a.ID)
	if err != nil {
		return nil, err
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].Revoked != ks[j].Revoked {
			return !ks[i].Revoked
		}
		return ks[i].CreatedAt.After(ks[j].CreatedAt)
	})
	return &keysData{Keys: ks, PlanActive: a.PlanActive(d.Now())}, nil
}

func (d *Dashboard) keys(w http.ResponseWriter, r *http.Request) {
	data, err := d.keysData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	v := view{Title: "API keys", Nav: "keys", Data: data}
	// The notice after a revocation names the key by its prefix; only a
	// revoked key of this account is ever named, so the address cannot be
	// used to put words on the page.
	if p := r.URL.Query().Get("revoked"); p != "" {
		for _, k := range data.Keys {
			if k.Revoked && k.Prefix == p {
				v.Notice = "Key " + k.Prefix + " is revoked: it stopped working at once."
				break
			}
		}
	}
	d.render(w, r, http.StatusOK, "keys", v)
}

func (d *Dashboard) createKey(w http.ResponseWriter, r *http.Request) {
	t := accounts.KeyType(r.PostFormValue("type"))
	if t != accounts.PayAsYouGo && t != accounts.Unlimited {
		data, err := d.keysData(r)
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		d.render(w, r, http.StatusUnprocessableEntity, "keys", view{Title: "API keys", Nav: "keys", Data: data, Error: "Choose a key type."})
		return
	}
	value, k, err := d.Accounts.CreateKey(r.Context(), sessionFrom(r.Context()).User.AccountID, t)
	var le *accounts.LimitError
	if errors.As(err, &le) { // the account's key limit (docs/security.md)
		data, derr := d.keysData(r)
		if derr != nil {
			d.serverError(w, r, derr)
			return
		}
		d.render(w, r, limitStatus, "keys", view{Title: "API keys", Nav: "keys", Data: data, Error: apiserver.LimitAPIError(le).Detail})
		return
	}
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.Logger.Info("dashboard key created", "user", sessionFrom(r.Context()).User.ID, "key", k.Prefix, "type", string(t))
	data, err := d.keysData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	data.NewKey, data.NewKeyType = value, t
	d.render(w, r, http.StatusOK, "keys", view{Title: "API keys", Nav: "keys", Data: data})
}

// accountKey finds a key of the signed-in account by id.
func (d *Dashboard) accountKey(r *http.Request) (*accounts.Key, error) {
	ks, err := d.Accounts.Keys(r.Context(), sessionFrom(r.Context()).User.AccountID)
	if err != nil {
		return nil, err
	}
	id := chi.URLParam(r, "id")
	for i := range ks {
		if ks[i].ID == id {
			return &ks[i], nil
		}
	}
	return nil, accounts.ErrNotFound
}

// keyOf is the account's key the path names; false when it has answered
// instead (404, or 500).
func (d *Dashboard) keyOf(w http.ResponseWriter, r *http.Request) (*accounts.Key, bool) {
	k, err := d.accountKey(r)
	if errors.Is(err, accounts.ErrNotFound) {
		d.errorPage(w, r, http.StatusNotFound, "Key not found", "This account has no such key.")
		return nil, false
	}
	if err != nil {
		d.serverError(w, r, err)
		return nil, false
	}
	return k, true
}

func (d *Dashboard) revokeForm(w http.ResponseWriter, r *http.Request) {
	k, ok := d.keyOf(w, r)
	if !ok {
		return
	}
	d.render(w, r, http.StatusOK, "revoke", view{Title: "Revoke key", Nav: "keys", Data: k})
}

func (d *Dashboard) revokeKey(w http.ResponseWriter, r *http.Request) {
	k, ok := d.keyOf(w, r)
	if !ok {
		return
	}
	if err := d.Accounts.RevokeKey(r.Context(), k.ID); err != nil {
		d.serverError(w, r, err)
		return
	}
	d.Logger.Info("dashboard key revoked", "user", sessionFrom(r.Context()).User.ID, "key", k.Prefix)
	http.Redirect(w, r, Base+"/keys?revoked="+k.Prefix, http.StatusSeeOther)
}

const jobsListed = 100

func (d *Dashboard) accountJobs(r *http.Request, n int) ([]jobView, error) {
	js, err := d.Jobs.AccountJobs(r.Context(), sessionFrom(r.Context()).User.AccountID, n)
	if err != nil {
		return nil, err
	}
	out := make([]jobView, 0, len(js))
	for _, j := range js {
		out = append(out, d.view(j))
	}
	return out, nil
}

func (d *Dashboard) jobsPage(w http.ResponseWriter, r *http.Request) {
	js, err := d.accountJobs(r, jobsListed)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "jobs", view{Title: "Jobs", Nav: "jobs", Data: js})
}

// apiJobs is the JSON the jobs page polls.
func (d *Dashboard) apiJobs(w http.ResponseWriter, r *http.Request) {
	js, err := d.accountJobs(r, jobsListed)
	if err != nil {
		d.Logger.Error("dashboard jobs", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "Internal server error"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": js})
}

// accountJob reads the signed-in account's job the path names, whichever
// key made it; another account's is jobs.ErrJobNotFound.
func (d *Dashboard) accountJob(r *http.Request) (*jobs.Job, error) {
	return d.Jobs.GetInAccount(r.Context(), sessionFrom(r.Context()).User.AccountID, chi.URLParam(r, "id"))
}

// jobOf is the account's job the path names; false when it has answered
// instead (the 404 page, or 500).
func (d *Dashboard) jobOf(w http.ResponseWriter, r *http.Request) (*jobs.Job, bool) {
	j, err := d.accountJob(r)
	if errors.Is(err, jobs.ErrJobNotFound) {
		d.errorPage(w, r, http.StatusNotFound, "Job not found", "This account has no such job (jobs are kept for the retention period).")
		return nil, false
	}
	if err != nil {
		d.serverError(w, r, err)
		return nil, false
	}
	return j, true
}

func (d *Dashboard) apiJob(w http.ResponseWriter, r *http.Request) {
	j, err := d.accountJob(r)
	if errors.Is(err, jobs.ErrJobNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Job not found"})
		return
	}
	if err != nil {
		d.Logger.Error("dashboard job", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "Internal server error"})
		return
	}
	writeJSON(w, http.StatusOK, d.view(j))
}

const resultsPage = 50

type jobData struct {
	Job        jobView
	Columns    []string
	Rows       [][]string
	ResultsErr string
	Offset     int
	PrevOffset int
	NextOffset int // -1: no next page
	LastRow    int
	ChartH     int
}

func (d *Dashboard) jobPage(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobOf(w, r)
	if !ok {
		return
	}
	off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	off = max(0, min(off, int(j.TotalRows)))
	data := jobData{Job: d.view(j), Offset: off, PrevOffset: max(0, off-resultsPage), NextOffset: -1}
	data.ChartH = max(28, len(data.Job.Outcomes)*28)
	cols, rows, e := d.API.ResultCells(r.Context(), j, off, resultsPage)
	if e != nil {
		data.ResultsErr = e.Detail
	} else {
		data.Columns, data.Rows = cols, rows
		data.LastRow = off + len(rows)
		if int64(off+resultsPage) < j.TotalRows {
			data.NextOffset = off + resultsPage
		}
	}
	d.render(w, r, http.StatusOK, "job", view{Title: "Job " + j.ID, Nav: "jobs", Data: data})
}

func (d *Dashboard) jobCSV(w http.ResponseWriter, r *http.Request) {
	j, ok := d.jobOf(w, r)
	if !ok {
		return
	}
	if e := d.API.WriteJobCSV(w, r, j); e != nil {
		d.errorPage(w, r, e.Status, "Results not ready", e.Detail)
	}
}

const ledgerPage = 50

// entryID is a ledger stream entry id (the page cursor).
var entryID = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

type ledgerData struct {
	Entries []billing.Entry
	Next    string // the before= of the next (older) page; "" when none
	First   bool
}

func (d *Dashboard) ledger(w http.ResponseWriter, r *http.Request) {
	before := r.URL.Query().Get("before")
	if before != "" && !entryID.MatchString(before) {
		http.Redirect(w, r, Base+"/ledger", http.StatusSeeOther)
		return
	}
	es, err := d.Billing.EntriesBefore(r.Context(), sessionFrom(r.Context()).User.AccountID, before, ledgerPage+1)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	data := ledgerData{First: before == ""}
	if len(es) > ledgerPage {
		es = es[:ledgerPage]
		data.Next = es[len(es)-1].ID
	}
	data.Entries = es
	d.render(w, r, http.StatusOK, "ledger", view{Title: "Ledger", Nav: "ledger", Data: data})
}
