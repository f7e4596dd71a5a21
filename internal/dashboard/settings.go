package dashboard

// The account's settings page: how long its jobs are kept (docs/privacy.md).
// Every user of the account sees it; only an owner (users.RoleOwner) may
// change it, 1 day up to the deployment's retention (--retention, at most
// accounts.MaxRetentionDays), or go back to the deployment's. The engine
// reads the choice at each submission: it applies from the next job.

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
)

// settingsData is the settings page.
type settingsData struct {
	// Days is the account's own choice (0: the deployment's).
	Days int
	// EffectiveDays is how long its new jobs are kept; MaxDays the most it
	// may choose (the deployment's retention in whole days, 1..30).
	EffectiveDays int
	MaxDays       int
	// DefaultDays is the deployment's retention in whole days (at least 1).
	DefaultDays int
	Owner       bool
}

// maxRetentionDays is the most an account may choose here: the
// deployment's retention in whole days, between 1 and 30.
func (d *Dashboard) maxRetentionDays() int {
	days := accounts.MaxRetentionDays
	if d.Jobs != nil && d.Jobs.Retention > 0 {
		days = min(days, int(d.Jobs.Retention/(24*time.Hour)))
	}
	return max(1, days)
}

func (d *Dashboard) settingsData(r *http.Request) (*settingsData, error) {
	a, err := d.account(r)
	if err != nil {
		return nil, err
	}
	maxDays, def := d.maxRetentionDays(), accounts.MaxRetentionDays
	if d.Jobs != nil && d.Jobs.Retention > 0 {
		def = max(1, int(d.Jobs.Retention/(24*time.Hour)))
	}
	eff := def
	if a.RetentionDays > 0 {
		eff = min(a.RetentionDays, def)
	}
	return &settingsData{Days: a.RetentionDays, EffectiveDays: eff, MaxDays: maxDays, DefaultDays: def,
		Owner: sessionFrom(r.Context()).User.IsOwner()}, nil
}

func (d *Dashboard) settings(w http.ResponseWriter, r *http.Request) {
	data, err := d.settingsData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	v := view{Title: "Settings", Nav: "settings", Data: data}
	if r.URL.Query().Get("saved") == "1" {
		v.Notice = "Saved. New jobs are kept " + strconv.Itoa(data.EffectiveDays) + " " + data.Unit() +
			"; jobs already made keep their expiry."
	}
	d.render(w, r, http.StatusOK, "settings", v)
}

// setRetention is the owner's POST of the retention form: days (1..the
// deployment's maximum) or default.
func (d *Dashboard) setRetention(w http.ResponseWriter, r *http.Request) {
	data, err := d.settingsData(r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	u := sessionFrom(r.Context()).User
	if !u.IsOwner() {
		d.errorPage(w, r, http.StatusForbidden, "Only the account's owner",
			"Only the account's owner may change how long its jobs are kept.")
		return
	}
	days := 0
	if r.PostFormValue("use_default") != "1" {
		n, err := strconv.Atoi(strings.TrimSpace(r.PostFormValue("retention_days")))
		if err != nil || n < 1 || n > data.MaxDays {
			d.render(w, r, http.StatusUnprocessableEntity, "settings", view{Title: "Settings", Nav: "settings", Data: data,
				Error: "Choose a number of days from 1 to " + strconv.Itoa(data.MaxDays) + "."})
			return
		}
		days = n
	}
	if err := d.Accounts.SetRetention(r.Context(), u.AccountID, days); err != nil {
		d.serverError(w, r, err)
		return
	}
	d.Logger.Info("dashboard retention set", "user", u.ID, "account", u.AccountID, "days", days)
	http.Redirect(w, r, Base+"/settings?saved=1", http.StatusSeeOther)
}

// Unit is "day" or "days" for EffectiveDays.
func (s *settingsData) Unit() string { return pluralInt(s.EffectiveDays, "day", "days") }

func pluralInt(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
