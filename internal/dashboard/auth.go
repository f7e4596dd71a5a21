package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/dashboard/users"
)

type loginData struct {
	Email string
	Next  string
}

// safeNext keeps a post-sign-in redirect inside the dashboard.
func safeNext(n string) string {
	if !strings.HasPrefix(n, Base) || strings.HasPrefix(n, "//") || strings.ContainsAny(n, "\\\r\n") {
		return Base + "/"
	}
	return n
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	if sessionFrom(r.Context()) != nil {
		http.Redirect(w, r, Base+"/", http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", view{Title: "Sign in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

// badSignIn is the one message of every failed sign-in: it never says
// whether the email exists.
const badSignIn = "The email or password is not right, or this account has no password yet."

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r, 64<<10); err != nil {
		d.errorPage(w, r, http.StatusRequestEntityTooLarge, "Request too large", err.Error())
		return
	}
	email := strings.TrimSpace(r.PostFormValue("email"))
	if len(email) > 320 { // no longer than an email can be: it keys the throttle
		email = email[:320]
	}
	data := loginData{Email: email, Next: safeNext(r.PostFormValue("next"))}
	client := d.throttleClient(r)
	ok, wait, err := d.Users.Attempt(r.Context(), email, client)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if !ok {
		d.render(w, r, http.StatusTooManyRequests, "login", view{Title: "Sign in", Data: data, Error: tooManyAttempts(w, wait)})
		return
	}
	u, err := d.Users.CheckPassword(r.Context(), email, r.PostFormValue("password"))
	if errors.Is(err, users.ErrBadCredentials) {
		d.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in", Data: data, Error: badSignIn})
		return
	}
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	_ = d.Users.Succeeded(r.Context(), email, client)
	d.startSession(w, r, u, data.Next)
}

// tooManyAttempts sets the Retry-After of a sign-in refused for too many
// attempts (wait is how long until one is allowed again) and returns its
// message.
func tooManyAttempts(w http.ResponseWriter, wait time.Duration) string {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	if secs < 120 {
		return fmt.Sprintf("Too many sign-in attempts. Try again in %d second(s).", secs)
	}
	return fmt.Sprintf("Too many sign-in attempts. Try again in %d minute(s).", (secs+59)/60)
}

// startSession signs u in with a brand-new session id (whatever cookie
// the browser brought is replaced: no session fixation) and ends the
// session the browser had, if any.
func (d *Dashboard) startSession(w http.ResponseWriter, r *http.Request, u *users.User, next string) {
	if old := sessionFrom(r.Context()); old != nil {
		_ = d.Users.EndSession(r.Context(), old)
	}
	id, _, err := d.Users.NewSession(r.Context(), u)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	d.setSessionCookie(w, id)
	d.Logger.Info("dashboard sign-in", "user", u.ID, "account", u.AccountID)
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

type linkData struct {
	Token string
	Email string
}

// linkForm shows a one-time link's button: the token is used only by the
// POST, so a mail scanner that fetches the link does not spend it.
func (d *Dashboard) linkForm(w http.ResponseWriter, r *http.Request) {
	t := r.URL.Query().Get("token")
	u, err := d.Users.PeekLink(r.Context(), t)
	if err != nil && !errors.Is(err, users.ErrBadCredentials) && !errors.Is(err, users.ErrNotFound) {
		d.serverError(w, r, err)
		return
	}
	if u == nil {
		d.render(w, r, http.StatusGone, "link", view{Title: "Sign-in link", Error: "This sign-in link has been used or has expired. Ask for a new one."})
		return
	}
	d.render(w, r, http.StatusOK, "link", view{Title: "Sign-in link", Data: linkData{Token: t, Email: u.Email}})
}

func (d *Dashboard) linkLogin(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r, 64<<10); err != nil {
		d.errorPage(w, r, http.StatusRequestEntityTooLarge, "Request too large", err.Error())
		return
	}
	client := d.throttleClient(r)
	ok, wait, err := d.Users.Attempt(r.Context(), "", client)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if !ok {
		d.render(w, r, http.StatusTooManyRequests, "link", view{Title: "Sign-in link", Error: tooManyAttempts(w, wait)})
		return
	}
	u, err := d.Users.RedeemLink(r.Context(), r.PostFormValue("token"))
	if errors.Is(err, users.ErrBadCredentials) {
		d.render(w, r, http.StatusGone, "link", view{Title: "Sign-in link", Error: "This sign-in link has been used or has expired. Ask for a new one."})
		return
	}
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	_ = d.Users.Succeeded(r.Context(), "", client)
	d.startSession(w, r, u, Base+"/")
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if err := d.Users.EndSession(r.Context(), sessionFrom(r.Context())); err != nil {
		d.serverError(w, r, err)
		return
	}
	d.clearCookie(w)
	http.Redirect(w, r, Base+"/login", http.StatusSeeOther)
}

// DemoEmail is the demo account's dashboard user (make run).
const DemoEmail = "demo@bulkd.example"

// Demo makes sure the demo account has a dashboard user and prints the
// dashboard's address with a fresh one-time sign-in link (valid a day)
// to out. baseURL is e.g. http://127.0.0.1:8080.
func Demo(ctx context.Context, us *users.Store, accountID, baseURL string, out io.Writer) error {
	u, _, err := us.ByEmail(ctx, DemoEmail)
	if errors.Is(err, users.ErrNotFound) {
		u, err = us.Create(ctx, accountID, DemoEmail, "")
	}
	if err != nil {
		return err
	}
	if u.AccountID != accountID {
		return fmt.Errorf("%s belongs to account %s, not the demo account %s", DemoEmail, u.AccountID, accountID)
	}
	t, err := us.NewLink(ctx, u.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nDashboard: %s%s/ (user %s)\nOne-time sign-in link, valid 24 h:\n  %s\n\n",
		baseURL, Base, DemoEmail, users.LinkURL(baseURL, t))
	return nil
}
