package dashboard

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

// pageNames are the templates, each rendered inside layout.html.
var pageNames = []string{"login", "link", "error", "overview", "keys", "revoke", "jobs", "job", "newjob", "mapping", "confirm", "ledger", "deletejob", "deleted", "settings"}

func parsePages() map[string]*template.Template {
	out := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		out[n] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/partials.html", "templates/"+n+".html"))
	}
	return out
}

// assetVersion is a digest of the embedded assets: their URLs carry it, so
// a new binary's assets are fetched at once and old ones may be cached.
var assetVersion = func() string {
	h := sha256.New()
	for _, n := range []string{"static/app.css", "static/app.js"} {
		b, _ := assets.ReadFile(n)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

var funcs = template.FuncMap{
	"base":  func() string { return Base },
	"asset": func(name string) string { return Base + "/static/" + name + "?v=" + assetVersion },
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"num": formatInt,
	"keyType": func(t accounts.KeyType) string {
		if t == accounts.Unlimited {
			return "Unlimited plan"
		}
		return "Pay-as-you-go"
	},
	"add":   func(a, b int) int { return a + b },
	"int64": func(i int) int64 { return int64(i) },
	"plural": func(n int64, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	},
}

// formatInt writes n with thousands separators.
func formatInt(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// view is what every page's template gets.
type view struct {
	Title   string
	Nav     string         // which nav item is current
	Session *users.Session // set by render; nil when signed out
	Notice  string         // a success message
	Error   string         // an error message
	Data    any
}

// Email is the signed-in user's email.
func (v view) Email() string {
	if v.Session == nil {
		return ""
	}
	return v.Session.User.Email
}

// CSRF is the session's token every form carries.
func (v view) CSRF() string {
	if v.Session == nil {
		return ""
	}
	return v.Session.CSRF
}

// render writes a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	v.Session = sessionFrom(r.Context())
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, v); err != nil {
		d.Logger.Error("dashboard template", "page", page, "err", err)
		http.Error(w, "Internal server error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct{ Heading, Message string }

func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, status int, heading, msg string) {
	d.render(w, r, status, "error", view{Title: heading, Data: errorData{heading, msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
