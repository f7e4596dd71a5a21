package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/spamcheck"
)

// SpamEngine checks a message: SpamAssassin's spamd through *spamc.Client.
type SpamEngine interface {
	Report(ctx context.Context, msg []byte) (*spamc.Result, error)
}

// SpamCheck is what POST /v1/content-spam-check needs (SPEC 4.6; the
// request and answer are ours, docs/api.md).
type SpamCheck struct {
	// Engine is spamd; nil means none is configured (503 engine_unavailable).
	Engine SpamEngine
	// Allowances are the daily checks per account, by plan.
	Allowances spamcheck.Allowances
}

// maxSpamBody bounds the route's JSON body (admission control weighs a
// chunked body at it too).
const maxSpamBody = spamcheck.MaxBodyBytes

func newSpamMetrics(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulkd_spam_checks_total",
		Help: "Content spam checks by outcome: ham, spam, quota (429 daily_quota_exceeded), unavailable (503 engine_unavailable, allowance given back), failed (500).",
	}, []string{"outcome"})
	reg.MustRegister(c)
	return c
}

// contentSpamCheck: decode and validate (400/422: nothing counted), build
// the message, take one check from the account's daily allowance (429
// daily_quota_exceeded when it is used up), ask spamd, answer. Every way
// out without an answer (spamd unavailable, a 500, a panic) gives the check
// back, as SPEC 7 has failed requests refunded.
func (s *Server) contentSpamCheck(w http.ResponseWriter, r *http.Request) {
	var req spamcheck.Request
	if e := decodeJSON(w, r, min(s.MaxBodyBytes, maxSpamBody), &req); e != nil {
		apierr.Write(w, e)
		return
	}
	if e := req.Validate(); e != nil {
		apierr.Write(w, e)
		return
	}
	// The Date header is real time, not the API's clock (which tests move):
	// SpamAssassin compares it with its own.
	msg, e := req.Message(time.Now())
	if e != nil {
		if e.Status >= 500 {
			s.spamChecks.WithLabelValues("failed").Inc()
			s.internalError(w, r, errors.New(e.Detail))
			return
		}
		apierr.Write(w, e)
		return
	}
	if s.Spam == nil || s.Spam.Engine == nil {
		s.spamChecks.WithLabelValues("unavailable").Inc()
		apierr.Write(w, engineUnavailable("no content analysis engine is configured on this server"))
		return
	}
	// A spamd the breaker already knows to be down is answered before any
	// allowance moves: the fast path of an outage.
	if a, ok := s.Spam.Engine.(interface{ Available() bool }); ok && !a.Available() {
		s.spamChecks.WithLabelValues("unavailable").Inc()
		apierr.Write(w, engineUnavailable("the engine did not answer the last checks"))
		return
	}

	p := PrincipalFrom(r.Context())
	now := s.Now()
	win := billing.DailyWindow(spamcheck.WindowName, now)
	limit := s.Spam.Allowances.For(&p.Account, now)
	chargeID, ok := s.newChargeID(w, r, p.Account.ID, "spam-")
	if !ok {
		return
	}
	used, err := s.Billing.Consume(r.Context(), billing.Consumption{AccountID: p.Account.ID, KeyID: p.Key.ID,
		ChargeID: chargeID, Window: win, N: 1, Limit: limit})
	var qe *billing.QuotaError
	switch {
	case errors.As(err, &qe):
		s.spamChecks.WithLabelValues("quota").Inc()
		e := apierr.WithCode(http.StatusTooManyRequests, apierr.CodeDailyQuotaExceeded,
			"Daily content spam check allowance used up: "+strconv.FormatInt(qe.Used, 10)+" of "+strconv.FormatInt(qe.Limit, 10)+
				" checks today. It resets at "+qe.Window.Reset.UTC().Format(time.RFC3339)+" (UTC midnight).")
		e.RetryAfter = billing.RetryAfterSeconds(qe.RetryAfter)
		apierr.Write(w, e)
		return
	case err != nil:
		s.spamChecks.WithLabelValues("failed").Inc()
		s.internalError(w, r, err)
		return
	}
	kept := false
	defer func() {
		if !kept {
			s.releaseSpamCheck(r.Context(), p.Account.ID, chargeID)
		}
	}()

	res, err := s.Spam.Engine.Report(r.Context(), msg)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left; the deferred release gives the check back
		}
		s.spamChecks.WithLabelValues("unavailable").Inc()
		// Shed load (queue full, breaker open) is counted, not logged one
		// by one: under overload that would be a line per request.
		if !errors.Is(err, spamc.ErrBusy) {
			s.Logger.Warn("spam check: engine unavailable", "request_id", RequestIDFrom(r.Context()), "err", err)
		}
		apierr.Write(w, engineUnavailable("the engine did not answer in time or refused the connection"))
		return
	}
	kept = true
	markKept(r)
	outcome := "ham"
	if res.Spam {
		outcome = "spam"
	}
	s.spamChecks.WithLabelValues(outcome).Inc()
	writeJSON(w, http.StatusOK, spamcheck.Answer(res, spamcheck.Allowance{
		Limit: limit, Used: used, Remaining: max(0, limit-used), ResetAt: win.Reset}))
}

// engineUnavailable is SPEC 7's 503 engine_unavailable; why is logged-safe
// (it names no address).
func engineUnavailable(why string) *apierr.Error {
	return apierr.WithCode(http.StatusServiceUnavailable, apierr.CodeEngineUnavailable,
		"The content analysis engine (SpamAssassin) is unavailable: "+why+
			". Nothing was counted against today's allowance; try again in a few seconds.")
}

// releaseSpamCheck gives a check back to the daily allowance, even when
// the request's context is gone.
func (s *Server) releaseSpamCheck(ctx context.Context, accountID, chargeID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.Billing.Reverse(ctx, accountID, chargeID, "spam check failed"); err != nil {
		s.Logger.Error("spam check allowance release failed", "charge", chargeID, "err", err)
	}
}
