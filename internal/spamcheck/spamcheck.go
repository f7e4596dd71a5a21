// Package spamcheck is the content spam check's domain part (POST
// /v1/content-spam-check, docs/api.md): the request, its validation, the
// well-formed MIME message built from its parts, the answer built from
// spamd's report (rules, what to fix first), and the daily allowances per
// plan. The spamd protocol is internal/spamc; the HTTP handler and the
// metering are in apiserver/spamcheck.go.
package spamcheck

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/jsonbody"
	"github.com/bulkd/bulkd/internal/spamc"
)

// Limits. MaxMessageBytes is spamc's default --max-size (500 KiB): what
// SpamAssassin deployments are used to scanning; a marketing email is
// typically 20 to 100 KB. MaxBodyBytes bounds the JSON request, which
// carries the message JSON-escaped (quotes, backslashes and control
// characters grow): past it the body is not read (400, like every body
// over its limit in this API).
const (
	MaxMessageBytes = 512_000
	MaxBodyBytes    = 4 << 20
	maxHeaderChars  = 998 // RFC 5322's line limit, for subject and addresses
)

// WindowName is the quota window (and ledger unit) of the daily allowance.
const WindowName = "spam_checks"

// Request is POST /v1/content-spam-check's body: either the parts of a
// message (subject, from, reply_to, text and/or html), from which a
// well-formed MIME message is built, or a whole RFC 5322 message (raw).
type Request struct {
	Subject *string `json:"subject"`
	From    *string `json:"from"`
	ReplyTo *string `json:"reply_to"`
	Text    *string `json:"text"`
	HTML    *string `json:"html"`
	Raw     *string `json:"raw"`
}

// Validate checks the request's shape; the message size is checked when it
// is built.
func (r *Request) Validate() *apierr.Error {
	var v apierr.Validation
	if r.Raw != nil {
		for _, f := range []struct {
			name string
			val  *string
		}{{"subject", r.Subject}, {"from", r.From}, {"reply_to", r.ReplyTo}, {"text", r.Text}, {"html", r.HTML}} {
			if f.val != nil {
				v.Add("body."+f.name, apierr.TypeValueError, "Not allowed together with raw: raw is a whole message, with its own headers and body")
			}
		}
		switch {
		case *r.Raw == "":
			v.Add("body.raw", apierr.TypeStringTooShort, "String should have at least 1 character")
		case len(*r.Raw) > MaxMessageBytes:
			v.Add("body.raw", apierr.TypeStringTooLong, fmt.Sprintf("Message should have at most %d bytes; it has %d", MaxMessageBytes, len(*r.Raw)))
		default:
			if err := checkRaw(*r.Raw); err != nil {
				v.Add("body.raw", apierr.TypeValueError, "Not an RFC 5322 message: "+err.Error())
			}
		}
		return v.Err()
	}
	if (r.Text == nil || *r.Text == "") && (r.HTML == nil || *r.HTML == "") {
		if r.Text == nil && r.HTML == nil {
			v.Add("body.text", apierr.TypeMissing, "Field required: text or html (or a whole message in raw)")
		} else {
			v.Add("body.text", apierr.TypeStringTooShort, "text or html should have at least 1 character")
		}
	}
	headerField(&v, "subject", r.Subject, false)
	headerField(&v, "from", r.From, true)
	headerField(&v, "reply_to", r.ReplyTo, true)
	return v.Err()
}

// headerField checks a value that goes into a header: one line (no
// control characters, so nothing can be injected into the message), valid
// UTF-8, at most 998 characters, and a parseable address when addr.
func headerField(v *apierr.Validation, name string, val *string, addr bool) {
	if val == nil {
		return
	}
	s := *val
	loc := "body." + name
	switch {
	case addr && strings.TrimSpace(s) == "":
		v.Add(loc, apierr.TypeStringTooShort, "String should have at least 1 character")
	case jsonbody.OverChars(s, maxHeaderChars):
		v.Add(loc, apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", maxHeaderChars))
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		v.Add(loc, apierr.TypeValueError, "Must be one line without control characters")
	case addr:
		if _, err := mail.ParseAddress(s); err != nil {
			v.Add(loc, apierr.TypeValueError, "Not an email address (as in \"Shop <news@shop.example>\" or news@shop.example): "+err.Error())
		}
	}
}

// checkRaw: a raw message must at least have a header section that parses
// and a From or Subject in it (plain text without any header is not a
// message; SpamAssassin would read its first line as a header).
func checkRaw(raw string) error {
	h, err := textproto.ReadHeader(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return fmt.Errorf("the header section does not parse (%v)", err)
	}
	if !h.Has("From") && !h.Has("Subject") {
		return fmt.Errorf("no From or Subject header (a message starts with its headers, then a blank line, then the body)")
	}
	return nil
}

// Placeholders used when the request leaves an address out: reserved
// domains (RFC 2606), so no rule reads anything into them.
const (
	defaultFrom = "Sender <sender@example.com>"
	recipient   = "Recipient <recipient@example.net>"
)

// Message returns the message spamd is to check: raw as given, or a MIME
// message built from the parts: From (a placeholder when left out), To (a
// placeholder recipient), Subject, Date (now), Message-ID, MIME-Version,
// and a text/plain part, a text/html part, or both as
// multipart/alternative, each UTF-8 in quoted-printable or base64 as a mail
// client would choose. A message over MaxMessageBytes is a 422.
func (r *Request) Message(now time.Time) ([]byte, *apierr.Error) {
	if r.Raw != nil {
		return []byte(*r.Raw), nil
	}
	msg, err := r.build(now)
	if err != nil {
		return nil, apierr.New(500, "building the message: "+err.Error())
	}
	if len(msg) > MaxMessageBytes {
		return nil, apierr.Unprocessable(apierr.Item{Loc: "body", Type: apierr.TypeTooLong,
			Msg: fmt.Sprintf("The message built from subject, from, text and html is %d bytes; at most %d are checked", len(msg), MaxMessageBytes)})
	}
	return msg, nil
}

func (r *Request) build(now time.Time) ([]byte, error) {
	var h mail.Header
	from, err := mail.ParseAddress(defaultFrom)
	if r.From != nil {
		from, err = mail.ParseAddress(*r.From)
	}
	if err != nil {
		return nil, err
	}
	to, _ := mail.ParseAddress(recipient)
	h.SetAddressList("From", []*mail.Address{from})
	h.SetAddressList("To", []*mail.Address{to})
	if r.ReplyTo != nil {
		rt, err := mail.ParseAddress(*r.ReplyTo)
		if err != nil {
			return nil, err
		}
		h.SetAddressList("Reply-To", []*mail.Address{rt})
	}
	if r.Subject != nil {
		h.SetSubject(*r.Subject)
	}
	h.SetDate(now)
	h.SetMessageID(messageID(from.Address))
	h.Set("MIME-Version", "1.0")

	text := r.Text != nil && *r.Text != ""
	html := r.HTML != nil && *r.HTML != ""
	var b bytes.Buffer
	switch {
	case text && html:
		h.SetContentType("multipart/alternative", nil)
		mw, err := message.CreateWriter(&b, h.Header)
		if err != nil {
			return nil, err
		}
		for _, p := range []struct{ ct, body string }{{"text/plain", *r.Text}, {"text/html", *r.HTML}} {
			var ph message.Header
			ph.SetContentType(p.ct, map[string]string{"charset": "utf-8"})
			ph.Set("Content-Transfer-Encoding", transferEncoding(p.body))
			pw, err := mw.CreatePart(ph)
			if err != nil {
				return nil, err
			}
			if _, err := io.WriteString(pw, crlf(p.body)); err != nil {
				return nil, err
			}
			if err := pw.Close(); err != nil {
				return nil, err
			}
		}
		if err := mw.Close(); err != nil {
			return nil, err
		}
	default:
		ct, body := "text/plain", ""
		if text {
			body = *r.Text
		} else {
			ct, body = "text/html", *r.HTML
		}
		h.SetContentType(ct, map[string]string{"charset": "utf-8"})
		h.Set("Content-Transfer-Encoding", transferEncoding(body))
		w, err := message.CreateWriter(&b, h.Header)
		if err != nil {
			return nil, err
		}
		if _, err := io.WriteString(w, crlf(body)); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// transferEncoding picks what a mail client would for a UTF-8 text part:
// quoted-printable for mostly-ASCII text (it stays readable, and
// SpamAssassin's MIME_BASE64_TEXT flags ASCII text hidden in base64), and
// base64 when quoted-printable would be the larger (each non-ASCII byte
// takes 3 in quoted-printable, 4/3 in base64: past about 1 byte in 6).
func transferEncoding(body string) string {
	escaped := 0
	for i := 0; i < len(body); i++ {
		if c := body[i]; c >= 0x80 || c == '=' {
			escaped++
		}
	}
	if 6*escaped > len(body) {
		return "base64"
	}
	return "quoted-printable"
}

// crlf makes a body's line ends CRLF, as in a message on the wire (a
// bare LF would be encoded by quoted-printable as a soft break otherwise).
func crlf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// messageID is <random@domain of from>, as a sender's mail system writes.
func messageID(addr string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	domain := "example.com"
	if i := strings.LastIndexByte(addr, '@'); i >= 0 && i < len(addr)-1 {
		domain = addr[i+1:]
	}
	return hex.EncodeToString(b[:]) + "@" + domain
}

// Response is the check's answer.
type Response struct {
	// Score is SpamAssassin's total; the message counts as spam at
	// Threshold (spamd's required_score) or above.
	Score     float64 `json:"score"`
	Threshold float64 `json:"threshold"`
	IsSpam    bool    `json:"is_spam"`
	// Rules are every rule that fired, highest score first.
	Rules []Rule `json:"rules"`
	// FixFirst are the rules that add the most to the score (at most
	// five, each adding more than zero), with what to change.
	FixFirst []Fix `json:"fix_first"`
	// Allowance is the account's daily allowance after this check.
	Allowance Allowance `json:"allowance"`
}

// Rule is one rule that fired.
type Rule struct {
	Name        string  `json:"name"`
	Score       float64 `json:"score"`
	Description string  `json:"description"`
}

// Fix is one thing to change.
type Fix struct {
	Rule   string  `json:"rule"`
	Score  float64 `json:"score"`
	Advice string  `json:"advice"`
}

// Allowance is the state of the daily allowance.
type Allowance struct {
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	ResetAt   time.Time `json:"reset_at"`
}

// maxFixes is how many rules fix_first lists.
const maxFixes = 5

// Answer builds the response from spamd's result.
func Answer(res *spamc.Result, a Allowance) Response {
	rules := make([]Rule, 0, len(res.Rules))
	for _, r := range res.Rules {
		rules = append(rules, Rule{Name: r.Name, Score: r.Score, Description: r.Description})
	}
	sort.SliceStable(rules, func(i, j int) bool {
		if rules[i].Score != rules[j].Score {
			return rules[i].Score > rules[j].Score
		}
		return rules[i].Name < rules[j].Name
	})
	fixes := []Fix{}
	for _, r := range rules {
		if r.Score <= 0 || len(fixes) == maxFixes {
			break
		}
		fixes = append(fixes, Fix{Rule: r.Name, Score: r.Score, Advice: Advice(r.Name, r.Description)})
	}
	return Response{Score: res.Score, Threshold: res.Threshold, IsSpam: res.Spam, Rules: rules, FixFirst: fixes, Allowance: a}
}

// Allowances are the daily spam checks per account, by plan: PlanNone is
// an account without an active unlimited plan (pay-as-you-go only, or a
// lapsed plan).
type Allowances map[accounts.Plan]int64

// DefaultAllowances: docs/billing.md says why these numbers.
func DefaultAllowances() Allowances {
	return Allowances{
		accounts.PlanNone:         100,
		accounts.PlanStarter:      250,
		accounts.PlanStandard:     500,
		accounts.PlanProfessional: 1000,
	}
}

// For is the allowance of an account at now: its plan's while the plan is
// active, the pay-as-you-go one otherwise.
func (a Allowances) For(acct *accounts.Account, now time.Time) int64 {
	if acct.PlanActive(now) {
		if n, ok := a[acct.Plan]; ok {
			return n
		}
	}
	return a[accounts.PlanNone]
}

// ParseAllowances applies "payg=100,starter=250,..." (payg or none for
// accounts without an active plan) over a.
func ParseAllowances(a Allowances, s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("--spam-check-allowances: %q is not plan=number", part)
		}
		name = strings.TrimSpace(name)
		if strings.EqualFold(name, "payg") {
			name = "none"
		}
		plan, err := accounts.ParsePlan(name)
		if err != nil {
			return fmt.Errorf("--spam-check-allowances: %w (or payg)", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("--spam-check-allowances: %q is not a count of checks", val)
		}
		a[plan] = n
	}
	return nil
}
