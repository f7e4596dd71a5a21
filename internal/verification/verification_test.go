package verification

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/verify"
)

func decode(t testing.TB, body string) (*jobs.Builder, int, string) {
	t.Helper()
	b := jobs.NewBuilder(Name, 0)
	e := decodeBody(New(nil, nil), strings.NewReader(body), b)
	if e != nil {
		raw, _ := json.Marshal(e)
		return b, e.Status, string(raw)
	}
	return b, 200, ""
}

// Addresses are one input when they normalize alike; the rows are the
// unique addresses in order of first appearance, grouped by domain for the
// shards.
func TestDecodeDedupes(t *testing.T) {
	b, code, _ := decode(t, `{"emails":[" Alice@Example.COM ","bob@other.test","alice@example.com","\"Q\"@example.com","\"q\"@example.com","nope","NOPE"]}`)
	if code != 200 {
		t.Fatal(code)
	}
	if b.Rows() != 5 || b.Distinct() != 5 {
		t.Fatalf("%d rows, %d distinct, want 5 and 5", b.Rows(), b.Distinct())
	}
}

func TestDecodeLimits(t *testing.T) {
	for body, want := range map[string]int{
		`{"emails":[]}`:          400,
		`{"emails":["a@b.c"]} x`: 400,
		`{"emails":"a@b.c"}`:     422,
		`{"emails":["ab"]}`:      422,
		`{"emails":[null]}`:      422,
		`{"other":[]}`:           422,
		`{"emails":["abc"]}`:     200,
		`{"emails":["` + strings.Repeat("é", 320) + `"]}`: 200, // characters, not bytes
		`{"emails":["` + strings.Repeat("é", 321) + `"]}`: 422,
	} {
		if _, code, e := decode(t, body); code != want {
			t.Errorf("%.60s: %d %s, want %d", body, code, e, want)
		}
	}
}

type fixedVerifier struct{ res []verify.Result }

func (f fixedVerifier) Verify(_ context.Context, emails []string) []verify.Result {
	return f.res[:len(emails)]
}

// A temporary verdict is provisional until the last attempt, then final;
// rows show unknown verdicts at 0 credits.
func TestRetryScheduleAndRows(t *testing.T) {
	grey := verify.Result{Email: "a@grey.test", Status: verify.StatusUnknown, Reason: verify.ReasonGreylisted, Temporary: true, RetryAfter: time.Hour}
	f := New(fixedVerifier{[]verify.Result{grey}}, []time.Duration{time.Minute, 2 * time.Minute})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Now = func() time.Time { return now }
	for attempt, want := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 3: 0} {
		a, err := f.Retry(context.Background(), []string{"a@grey.test"}, []int{attempt})
		if err != nil {
			t.Fatal(err)
		}
		if got := a[0].RetryAt; (want == 0) != got.IsZero() || (want > 0 && got.Sub(now) != want) {
			t.Errorf("attempt %d: retry at %v, want +%v", attempt, got, want)
		}
		var buf bytes.Buffer
		f.RenderRow(&buf, jobs.Row{Echo: "A@grey.test", First: true}, &jobs.StoredAnswer{Outcome: a[0].Outcome, Data: string(a[0].Data)})
		var row map[string]any
		if err := json.Unmarshal(buf.Bytes(), &row); err != nil {
			t.Fatalf("row %s: %v", buf.String(), err)
		}
		if row["input"] != "A@grey.test" || row["credits_consumed"] != 0.0 || row["retrying"] != (want > 0) || row["attempts"] != float64(attempt) {
			t.Errorf("attempt %d: row %s", attempt, buf.String())
		}
	}
	var buf bytes.Buffer
	f.RenderRow(&buf, jobs.Row{Echo: " X@Y.test", First: true}, nil)
	if !strings.Contains(buf.String(), `"status":"pending"`) || !strings.Contains(buf.String(), `"email":"x@y.test"`) || !strings.Contains(buf.String(), `"credits_consumed":0.2`) {
		t.Errorf("pending row %s", buf.String())
	}
}

func TestEstimatedCostRoundsUp(t *testing.T) {
	for n, want := range map[int64]int64{1: 1, 3: 1, 5: 1, 6: 2, 100_000: 20_000} {
		c, _ := Price.Mul(n)
		if got := EstimatedCost(c); got != want {
			t.Errorf("%d addresses (%v): %d, want %d", n, c, got, want)
		}
	}
	if Price != credits.Amount(200) {
		t.Fatal(Price)
	}
}

// FuzzVerificationBody: any body is accepted (at most 100,000 unique rows,
// each a distinct input) or refused with a 400/422 in the SPEC 2.10 shape;
// nothing panics.
func FuzzVerificationBody(f *testing.F) {
	for _, s := range []string{`{"emails":["a@b.test"]}`, `{"emails":[]}`, `{"emails":["ab",1,null]}`, `{"emails":"x"}`,
		`[]`, `{"emails":["\"quoted local\"@x.test","a@[127.0.0.1]","a@bücher.example"]}`, `{"emails":["a@b.test"],"emails":[]}`} {
		f.Add([]byte(s))
	}
	fam := New(nil, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		b := jobs.NewBuilder(Name, 0)
		e := decodeBody(fam, bytes.NewReader(body), b)
		if e == nil {
			if b.Rows() == 0 || b.Rows() > MaxEmails || b.Rows() != b.Distinct() {
				t.Fatalf("accepted %d rows, %d distinct", b.Rows(), b.Distinct())
			}
			return
		}
		if e.Status != 400 && e.Status != 422 {
			t.Fatalf("status %d", e.Status)
		}
		if e.Detail == "" || (e.Status == 422) != (len(e.Errors) > 0) {
			t.Fatalf("bad error %+v", e)
		}
	})
}
