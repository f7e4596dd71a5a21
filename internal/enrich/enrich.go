// Package enrich is the company-enrichment family of the job engine (SPEC
// 2.1 to 2.6): it classifies submitted rows, answers distinct company
// inputs from the company store (by canonical network URL, or by the
// company's own website domain, with a redirect check for domains), and
// renders result rows.
package enrich

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/company/redirect"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Family is the engine's name for company enrichment jobs.
const Family = "company_enrichment"

// Outcomes beyond the engine's shared ones.
const (
	OutcomeInvalidURL = "invalid_url"
	OutcomePending    = "pending"
)

// RedirectChecker tells whether the websites of a batch of domains redirect
// elsewhere (redirect.Checker.CheckAll): errs[i] set means it could not
// tell for domains[i]; at most concurrency websites are fetched at once.
type RedirectChecker interface {
	CheckAll(ctx context.Context, domains []string, concurrency int) ([]redirect.Result, []error)
}

// Answerer answers company inputs. Payloads are normalize.Input keys:
// "n:<canonical network URL>" or "d:<canonical domain>".
type Answerer struct {
	Store     *company.Store
	Redirects RedirectChecker // nil: no redirect checks
	// Concurrency bounds the website fetches of one batch's redirect
	// checks (default 32). The DNS questions that come first, and decide
	// the domains that do not exist, have the checker's own, higher bound.
	Concurrency int
}

// data is the stored answer: every data field of a result row (SPEC 2.4)
// other than the ones that depend on the submitted row.
type data struct {
	IsRedirect   bool    `json:"is_redirect"`
	RedirectedTo *string `json:"redirected_to"`
	company.Record
}

// Answer implements jobs.Answerer.
func (a *Answerer) Answer(ctx context.Context, payloads []string) ([]jobs.Answer, error) {
	var netIdx, domIdx []int
	var nets, doms []string
	for i, p := range payloads {
		switch {
		case strings.HasPrefix(p, normalize.KeyNetwork):
			netIdx, nets = append(netIdx, i), append(nets, p[len(normalize.KeyNetwork):])
		case strings.HasPrefix(p, normalize.KeyDomain):
			domIdx, doms = append(domIdx, i), append(doms, p[len(normalize.KeyDomain):])
		default:
			return nil, fmt.Errorf("enrich: payload %q has no kind", p)
		}
	}
	out := make([]jobs.Answer, len(payloads))
	if len(nets) > 0 {
		recs, err := a.Store.ByNetworkURL(ctx, nets)
		if err != nil {
			return nil, err
		}
		for k, i := range netIdx {
			d := data{}
			if recs[k] != nil {
				d.Record = *recs[k]
			} else {
				canon := nets[k] // not_found from a valid network URL keeps its canonical URL
				d.Record.NetworkURL = &canon
			}
			out[i] = encode(d, recs[k] != nil)
		}
	}
	if len(doms) > 0 {
		recs, err := a.Store.ByDomain(ctx, doms)
		if err != nil {
			return nil, err
		}
		redirects := a.checkRedirects(ctx, doms)
		for k, i := range domIdx {
			d := data{}
			if recs[k] != nil {
				d.Record = *recs[k]
			}
			if r := redirects[k]; r.IsRedirect {
				to := r.RedirectedTo
				d.IsRedirect, d.RedirectedTo = true, &to
			}
			out[i] = encode(d, recs[k] != nil)
		}
	}
	return out, nil
}

// checkRedirects runs the redirect checks of a batch. A site that cannot be
// reached (a domain that does not exist included) is reported as not
// redirecting: the row still answers whether we know the company, and we do
// not claim a redirect we did not see.
func (a *Answerer) checkRedirects(ctx context.Context, doms []string) []redirect.Result {
	res := make([]redirect.Result, len(doms))
	if a.Redirects == nil {
		return res
	}
	n := a.Concurrency
	if n <= 0 {
		n = 32
	}
	rs, errs := a.Redirects.CheckAll(ctx, doms, n)
	for i := range res {
		if errs[i] == nil {
			res[i] = rs[i]
		}
	}
	return res
}

func encode(d data, found bool) jobs.Answer {
	d.Record.Normalize()
	if found && d.EmailDomain == nil { // email on the company's own domain
		d.EmailDomain = d.Domain
	}
	b, err := json.Marshal(d)
	if err != nil { // only plain data types: cannot happen
		panic(fmt.Sprintf("enrich: encode answer: %v", err))
	}
	o := jobs.OutcomeNotFound
	if found {
		o = jobs.OutcomeFound
	}
	return jobs.Answer{Outcome: o, Data: b}
}

// emptyData is the data of a row with nothing known: null fields, empty
// arrays, no redirect.
var emptyData = func() string {
	d := data{}
	d.Record.Normalize()
	b, _ := json.Marshal(d)
	return string(b)
}()

// ErrorAnswer implements jobs.Answerer.
func (a *Answerer) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: jobs.OutcomeError, Data: []byte(emptyData)}
}

// Echo encodes what a row echoes back: which field was used and its value
// exactly as submitted.
func Echo(usedNetwork bool, raw *string) string {
	switch {
	case raw == nil:
		return "-"
	case usedNetwork:
		return "n" + *raw
	default:
		return "d" + *raw
	}
}

// Classify applies SPEC 2.1 and 2.5 rule 4 to one row. networkURL and
// domain are nil when absent (or JSON null). It returns the echo, and either
// the normalized input or the reason the row is invalid.
func Classify(n *normalize.Normalizer, networkURL, domain *string) (echo string, in normalize.Input, reason string) {
	nu, d := "", ""
	if networkURL != nil {
		nu = *networkURL
	}
	if domain != nil {
		d = *domain
	}
	in, err := n.Row(nu, d)
	// The network URL is used when it has a value (SPEC 2.1), even when it
	// turns out invalid; a blank one gives way to the domain. The normalizer
	// says which field it used; with both blank, the row echoes network_url
	// when it was sent.
	if in.Kind == normalize.KindNetwork || (in.Kind == 0 && networkURL != nil) {
		echo = Echo(true, networkURL)
	} else {
		echo = Echo(false, domain)
	}
	if err != nil {
		if inv, ok := err.(*normalize.Invalid); ok {
			return echo, in, inv.Reason
		}
		return echo, in, err.Error()
	}
	return echo, in, ""
}

// RenderRow appends one result row (SPEC 2.4) as JSON; ans is nil while
// the row is pending.
func RenderRow(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer, price string) {
	var kind byte = '-'
	var raw string
	if len(row.Echo) > 0 {
		kind, raw = row.Echo[0], row.Echo[1:]
	}
	result, credits, body := OutcomePending, "0", emptyData
	switch {
	case row.Index < 0:
		result = OutcomeInvalidURL
	case ans != nil:
		result, body = ans.Outcome, ans.Data
	}
	if row.Index >= 0 && row.First {
		credits = price
	}
	buf.WriteString(`{"result":"`)
	buf.WriteString(result)
	buf.WriteString(`","input":`)
	if kind == '-' {
		buf.WriteString("null")
	} else {
		writeString(buf, raw)
	}
	buf.WriteString(`,"input_url":`)
	if kind == 'n' {
		writeString(buf, raw)
	} else {
		buf.WriteString("null")
	}
	buf.WriteString(`,"credits_consumed":`)
	buf.WriteString(credits)
	buf.WriteString(`,"reason":`)
	if row.Index < 0 {
		writeString(buf, row.Reason)
	} else {
		buf.WriteString("null")
	}
	buf.WriteByte(',')
	buf.WriteString(body[1:]) // the stored object without its opening brace
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}
