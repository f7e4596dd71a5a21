package spamcheck_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message/mail"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/spamcheck"
)

func p(s string) *string { return &s }

// buildMessage validates req, builds its message, checks that every line
// stays within RFC 5322's 998 bytes, and parses the message back.
func buildMessage(t *testing.T, req spamcheck.Request) *mail.Reader {
	t.Helper()
	if e := req.Validate(); e != nil {
		t.Fatal(e)
	}
	msg, e := req.Message(now)
	if e != nil {
		t.Fatal(e)
	}
	for _, line := range strings.Split(string(msg), "\r\n") {
		if len(line) > 998 {
			t.Fatalf("line of %d bytes", len(line))
		}
	}
	mr, err := mail.CreateReader(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

var now = time.Date(2025, 11, 25, 10, 0, 0, 0, time.UTC)

// The built message parses back into what was asked for: headers, a
// multipart/alternative with both bodies intact (quoted-printable decoded,
// non-ASCII kept), a Date and a Message-ID at the sender's domain.
func TestMessageRoundTrip(t *testing.T) {
	long := strings.Repeat("Ünïcödé text with a long line that must be folded by quoted-printable. ", 20)
	req := spamcheck.Request{Subject: p("Soldes d'hiver : -50 % sur tout ✨"), From: p("Boutique Été <news@shop.example.com>"),
		ReplyTo: p("help@shop.example.com"), Text: p("Bonjour,\n" + long + "\n"), HTML: p("<html><body><p>Bonjour</p><p>" + long + "</p></body></html>")}
	mr := buildMessage(t, req)
	subj, _ := mr.Header.Subject()
	from, _ := mr.Header.AddressList("From")
	to, _ := mr.Header.AddressList("To")
	rt, _ := mr.Header.AddressList("Reply-To")
	date, _ := mr.Header.Date()
	mid, _ := mr.Header.MessageID()
	if subj != *req.Subject || len(from) != 1 || from[0].Name != "Boutique Été" || from[0].Address != "news@shop.example.com" ||
		len(to) != 1 || len(rt) != 1 || rt[0].Address != "help@shop.example.com" || !date.Equal(now) || !strings.HasSuffix(mid, "@shop.example.com") {
		t.Fatalf("headers: %q %v %v %v %v %q", subj, from, to, rt, date, mid)
	}
	if ct, _, _ := mr.Header.ContentType(); ct != "multipart/alternative" {
		t.Fatalf("content type %q", ct)
	}
	var got []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ct, params, _ := part.Header.(*mail.InlineHeader).ContentType()
		if params["charset"] != "utf-8" || part.Header.Get("Content-Transfer-Encoding") != "quoted-printable" {
			t.Fatalf("part %s %v", ct, part.Header)
		}
		b, _ := io.ReadAll(part.Body)
		got = append(got, ct+":"+string(b))
	}
	want := []string{"text/plain:" + strings.ReplaceAll(*req.Text, "\n", "\r\n"), "text/html:" + *req.HTML}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parts:\n%q\nwant\n%q", got, want)
	}
}

// One body: a single part of its type; no From: the placeholder.
func TestMessageSinglePart(t *testing.T) {
	req := spamcheck.Request{HTML: p("<p>Hi</p>")}
	mr := buildMessage(t, req)
	if ct, _, _ := mr.Header.ContentType(); ct != "text/html" {
		t.Fatalf("content type %q", ct)
	}
	from, _ := mr.Header.AddressList("From")
	if len(from) != 1 || from[0].Address != "sender@example.com" || mr.Header.Has("Subject") {
		t.Fatalf("from %v, subject %v", from, mr.Header.Has("Subject"))
	}
}

func TestValidate(t *testing.T) {
	big := strings.Repeat("x", spamcheck.MaxMessageBytes+1)
	for _, c := range []struct {
		name string
		req  spamcheck.Request
		locs []string
	}{
		{"nothing", spamcheck.Request{}, []string{"body.text"}},
		{"subject only", spamcheck.Request{Subject: p("hi")}, []string{"body.text"}},
		{"empty bodies", spamcheck.Request{Text: p(""), HTML: p("")}, []string{"body.text"}},
		{"text", spamcheck.Request{Text: p("hi")}, nil},
		{"html", spamcheck.Request{HTML: p("<p>hi</p>")}, nil},
		{"injected subject", spamcheck.Request{Subject: p("hi\r\nBcc: x@example.com"), Text: p("x")}, []string{"body.subject"}},
		{"long subject", spamcheck.Request{Subject: p(strings.Repeat("é", 999)), Text: p("x")}, []string{"body.subject"}},
		{"998 subject", spamcheck.Request{Subject: p(strings.Repeat("é", 998)), Text: p("x")}, nil},
		{"bad from", spamcheck.Request{From: p("not an address"), Text: p("x")}, []string{"body.from"}},
		{"empty from", spamcheck.Request{From: p(" "), Text: p("x")}, []string{"body.from"}},
		{"bad reply_to", spamcheck.Request{ReplyTo: p("a@"), Text: p("x")}, []string{"body.reply_to"}},
		{"invalid utf-8", spamcheck.Request{Subject: p("\xff"), Text: p("x")}, []string{"body.subject"}},
		{"raw", spamcheck.Request{Raw: p("Subject: hi\r\n\r\nbody")}, nil},
		{"raw and parts", spamcheck.Request{Raw: p("Subject: hi\r\n\r\nbody"), Text: p("x"), Subject: p("y")}, []string{"body.subject", "body.text"}},
		{"raw empty", spamcheck.Request{Raw: p("")}, []string{"body.raw"}},
		{"raw without headers", spamcheck.Request{Raw: p("just some text\nand more")}, []string{"body.raw"}},
		{"raw without From or Subject", spamcheck.Request{Raw: p("X-Foo: bar\n\nbody")}, []string{"body.raw"}},
		{"raw too large", spamcheck.Request{Raw: p("Subject: x\r\n\r\n" + big)}, []string{"body.raw"}},
	} {
		e := c.req.Validate()
		var locs []string
		if e != nil {
			if e.Status != 422 {
				t.Errorf("%s: status %d", c.name, e.Status)
			}
			for _, it := range e.Errors {
				locs = append(locs, it.Loc)
			}
		}
		if strings.Join(locs, ",") != strings.Join(c.locs, ",") {
			t.Errorf("%s: locs %v, want %v (%+v)", c.name, locs, c.locs, e)
		}
	}
}

// Parts that build a message over the limit are a 422 naming the limit;
// at the limit they pass.
func TestMessageSizeLimit(t *testing.T) {
	req := spamcheck.Request{Text: p(strings.Repeat("a", spamcheck.MaxMessageBytes))}
	_, e := req.Message(now)
	if e == nil || e.Status != 422 || e.Errors[0].Loc != "body" || !strings.Contains(e.Detail, "512000") {
		t.Fatalf("%+v", e)
	}
	req = spamcheck.Request{Text: p(strings.Repeat("a", spamcheck.MaxMessageBytes*9/10))} // quoted-printable adds 4% on long lines
	if _, e := req.Message(now); e != nil {
		t.Fatalf("%+v", e)
	}
}

func TestAnswer(t *testing.T) {
	res := &spamc.Result{Spam: true, Score: 7.9, Threshold: 5, Rules: []spamc.Rule{
		{Name: "NO_RELAYS", Score: 0, Description: "Informational"},
		{Name: "MIME_HTML_ONLY", Score: 0.7, Description: "BODY: Message only has text/html MIME parts"},
		{Name: "DEAR_FRIEND", Score: 2.7, Description: "BODY: Dear Friend? That's not very dear!"},
		{Name: "ALL_TRUSTED", Score: -1, Description: "Passed through trusted hosts"},
		{Name: "A_RULE", Score: 1, Description: "BODY: Something odd"},
		{Name: "B_RULE", Score: 1, Description: ""},
		{Name: "C_RULE", Score: 1, Description: "x"},
		{Name: "D_RULE", Score: 1, Description: "x"},
		{Name: "HTML_IMAGE_ONLY_16", Score: 1.5, Description: "BODY: HTML: images with 1200-1600 bytes of words"},
	}}
	a := spamcheck.Answer(res, spamcheck.Allowance{Limit: 100, Used: 3, Remaining: 97, ResetAt: now})
	var names []string
	for _, r := range a.Rules {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "DEAR_FRIEND,HTML_IMAGE_ONLY_16,A_RULE,B_RULE,C_RULE,D_RULE,MIME_HTML_ONLY,NO_RELAYS,ALL_TRUSTED" {
		t.Fatalf("order %v", names)
	}
	if len(a.FixFirst) != 5 || a.FixFirst[0].Rule != "DEAR_FRIEND" || !strings.Contains(a.FixFirst[0].Advice, "by name") ||
		a.FixFirst[1].Rule != "HTML_IMAGE_ONLY_16" || !strings.Contains(a.FixFirst[1].Advice, "images") ||
		a.FixFirst[2].Advice != "Rework what this rule found: Something odd" || !strings.Contains(a.FixFirst[3].Advice, "B_RULE") {
		t.Fatalf("fix_first %+v", a.FixFirst)
	}
	b, _ := json.Marshal(a)
	for _, k := range []string{`"score":7.9`, `"threshold":5`, `"is_spam":true`, `"fix_first":[`, `"allowance":{"limit":100,"used":3,"remaining":97,"reset_at":"2025-11-25T10:00:00Z"}`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	// Nothing to fix: an empty list, not null.
	b, _ = json.Marshal(spamcheck.Answer(&spamc.Result{Score: 0, Threshold: 5}, spamcheck.Allowance{}))
	if !bytes.Contains(b, []byte(`"rules":[],"fix_first":[]`)) {
		t.Fatalf("%s", b)
	}
}

func TestAllowances(t *testing.T) {
	a := spamcheck.DefaultAllowances()
	if err := spamcheck.ParseAllowances(a, "payg=7, professional=9,"); err != nil {
		t.Fatal(err)
	}
	end := now.Add(24 * time.Hour)
	for _, c := range []struct {
		acct accounts.Account
		want int64
	}{
		{accounts.Account{}, 7},
		{accounts.Account{Plan: accounts.PlanProfessional, PlanState: accounts.StateActive, PeriodEnd: end}, 9},
		{accounts.Account{Plan: accounts.PlanStarter, PlanState: accounts.StateActive, PeriodEnd: end}, 250},
		{accounts.Account{Plan: accounts.PlanStarter, PlanState: accounts.StateLapsed, PeriodEnd: end}, 7},
		{accounts.Account{Plan: accounts.PlanStandard, PlanState: accounts.StateActive, PeriodEnd: now.Add(-time.Hour)}, 7},
	} {
		if got := a.For(&c.acct, now); got != c.want {
			t.Errorf("%+v: %d, want %d", c.acct, got, c.want)
		}
	}
	for _, bad := range []string{"gold=5", "payg", "payg=-1", "payg=x"} {
		if err := spamcheck.ParseAllowances(spamcheck.DefaultAllowances(), bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzRequest: any request either fails validation with a 422 or builds a
// message that parses back and has no line over 998 bytes; none is a 500.
func FuzzRequest(f *testing.F) {
	f.Add("Hello", "Shop <a@b.example>", "", "text\nbody", "<p>x</p>", "")
	f.Add("", "", "", "", "", "Subject: x\r\n\r\nbody")
	f.Add("=?utf-8?q?x?=", "\"a\" <a@b>", "c@d", "\r\n.\r\n", "", "")
	f.Fuzz(func(t *testing.T, subject, from, replyTo, text, html, raw string) {
		opt := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		req := spamcheck.Request{Subject: opt(subject), From: opt(from), ReplyTo: opt(replyTo), Text: opt(text), HTML: opt(html), Raw: opt(raw)}
		if e := req.Validate(); e != nil {
			checkErr(t, e)
			return
		}
		msg, e := req.Message(now)
		if e != nil {
			checkErr(t, e)
			return
		}
		if req.Raw != nil {
			return
		}
		if _, err := mail.CreateReader(bytes.NewReader(msg)); err != nil {
			t.Fatalf("built message does not parse: %v\n%q", err, msg)
		}
		for _, line := range strings.Split(string(msg), "\r\n") {
			if len(line) > 998 {
				t.Fatalf("line of %d bytes", len(line))
			}
		}
	})
}

func checkErr(t *testing.T, e *apierr.Error) {
	t.Helper()
	if e.Status != 422 || len(e.Errors) == 0 {
		t.Fatalf("%+v", e)
	}
}

// The longest subject allowed (998 two-byte characters) is encoded and
// folded: every header line stays within RFC 5322's 998 bytes, and it
// reads back unchanged.
func TestLongSubjectFolded(t *testing.T) {
	req := spamcheck.Request{Subject: p(strings.Repeat("é", 998)), From: p(strings.Repeat("Ü", 900) + " <a@b.example>"), Text: p("x")}
	mr := buildMessage(t, req)
	if s, _ := mr.Header.Subject(); s != *req.Subject {
		t.Fatalf("subject %q", s)
	}
}

// Text mostly outside ASCII goes base64 (quoted-printable would triple
// it) and reads back unchanged; 200,000 bytes of Cyrillic fit the limit.
func TestMessageBase64ForNonASCII(t *testing.T) {
	text := strings.Repeat("Привет, это наша рассылка. ", 5000)[:200_000]
	text = strings.ToValidUTF8(text, "")
	req := spamcheck.Request{Subject: p("Новости"), Text: &text}
	mr := buildMessage(t, req)
	if cte := mr.Header.Get("Content-Transfer-Encoding"); cte != "base64" {
		t.Fatalf("Content-Transfer-Encoding %q", cte)
	}
	part, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(part.Body)
	if string(b) != text {
		t.Fatal("text changed in the round trip")
	}
}
