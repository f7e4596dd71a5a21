package lookup

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/jobs"
)

func decode(t *testing.T, body string) (*jobs.Builder, int, string) {
	t.Helper()
	b := jobs.NewBuilder(Name, 0)
	e := decodeBody(New(nil, nil), strings.NewReader(body), b)
	if e != nil {
		out, _ := json.Marshal(e)
		return b, e.Status, string(out)
	}
	return b, 200, ""
}

func TestDecodeDeduplicatesCaseInsensitivelyOnTrimmedFields(t *testing.T) {
	b, st, msg := decode(t, `{"input":[
		{"first_name":"Jane","last_name":"Doe","domain":"acme.test"},
		{"first_name":" jane ","last_name":"DOE","domain":"ACME.test "},
		{"first_name":"Jane","last_name":"Doe","domain":"other.test"},
		{"first_name":"John","last_name":"Doe","domain":"acme.test"}]}`)
	if st != 200 {
		t.Fatalf("%d %s", st, msg)
	}
	if b.Rows() != 3 || b.Distinct() != 3 {
		t.Fatalf("%d rows, %d distinct; want 3 unique", b.Rows(), b.Distinct())
	}
}

func TestDecodeErrors(t *testing.T) {
	long := strings.Repeat("ß", 256)
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"input":[]}`, 400, "empty"},
		{`{"input":{}}`, 422, `"loc":"body.input","msg":"Input should be a valid list"`},
		{`{"rows":[]}`, 422, `"loc":"body.input","msg":"Field required"`},
		{`{"input":[{"first_name":"a","last_name":"b"}]}`, 422, `"loc":"body.input.0.domain"`},
		{`{"input":[{"first_name":"a","last_name":"b","domain":7}]}`, 422, `"loc":"body.input.0.domain","msg":"Input should be a valid string"`},
		{`{"input":[{"first_name":"a","last_name":"b","domain":"x"},{"first_name":"` + long + `","last_name":"b","domain":"x"}]}`, 422, `"loc":"body.input.1.first_name"`},
		{`{"input":[null]}`, 422, `"loc":"body.input.0.first_name"`},
		{`{"input":[1]}`, 422, `"loc":"body.input.0"`},
		{`{"input":[{"first_name":"a","last_name":"b","domain":"x"}`, 400, ""},
	} {
		_, st, msg := decode(t, c.body)
		if st != c.status || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.body, st, msg, c.status, c.want)
		}
	}
	// 255 characters (not bytes) is the limit.
	ok := strings.Repeat("ß", 255)
	if _, st, msg := decode(t, `{"input":[{"first_name":"`+ok+`","last_name":"b","domain":"x"}]}`); st != 200 {
		t.Errorf("255 characters: %d %s", st, msg)
	}
}

func TestStatusCountsAndTimestamps(t *testing.T) {
	f := New(nil, nil)
	created := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	j := &jobs.Job{ID: "id", Status: jobs.StatusRunning, TotalRows: 10, CreatedAt: created,
		Outcomes: map[string]int64{OutcomeFound: 4, OutcomeNotFound: 2, OutcomeRetrying: 1}}
	st := f.Status(j).(StatusResponse)
	if st.Status != "running" || st.TotalProcessed != 6 || st.CompletedAt != nil ||
		st.Summary["total_found"] != 4 || st.Summary["total_not_found"] != 2 || st.Summary["total_retrying"] != 1 || st.Summary["total_pending"] != 3 {
		t.Fatalf("running status %+v", st)
	}
	// Retrying rows keep a job running whatever the engine calls it.
	j.Status = jobs.StatusRetrying
	if st := f.Status(j).(StatusResponse); st.Status != "running" {
		t.Fatalf("retrying job shown as %s", st.Status)
	}
	j.Status, j.CompletedAt = jobs.StatusCompleted, created.Add(time.Minute)
	j.Outcomes = map[string]int64{OutcomeFound: 7, OutcomeNotFound: 3}
	st = f.Status(j).(StatusResponse)
	if st.Status != "completed" || st.TotalProcessed != 10 || st.CompletedAt == nil || !st.CompletedAt.Equal(j.CompletedAt) {
		t.Fatalf("completed status %+v", st)
	}
}

// fakeFinder answers from a table: the finder itself is tested against
// the mail world in internal/finder.
type fakeFinder map[string]finder.Result

func (f fakeFinder) Find(_ context.Context, people []finder.Person) []finder.Result {
	out := make([]finder.Result, len(people))
	for i, p := range people {
		out[i] = f[p.FirstName]
	}
	return out
}

func TestRetrySchedulesTemporaryAnswersUntilTheLastAttempt(t *testing.T) {
	email := "a.b@x.test"
	ff := fakeFinder{
		"found": {Status: finder.StatusFound, Substatus: finder.SubVerified, Email: &email},
		"grey":  {Status: finder.StatusNotFound, Substatus: finder.SubUnknown, Temporary: true},
	}
	f := New(ff, []time.Duration{time.Minute, 5 * time.Minute})
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	f.Now = func() time.Time { return now }
	p := func(first string) string {
		b, _ := json.Marshal(finder.Person{FirstName: first, LastName: "b", Domain: "x.test"})
		return string(b)
	}
	ans, err := f.Retry(context.Background(), []string{p("found"), p("grey"), p("grey"), p("grey")}, []int{1, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if ans[0].Outcome != OutcomeFound || !ans[0].RetryAt.IsZero() {
		t.Errorf("found: %+v", ans[0])
	}
	if ans[1].Outcome != OutcomeRetrying || !ans[1].RetryAt.Equal(now.Add(time.Minute)) {
		t.Errorf("first greylisted attempt: %+v", ans[1])
	}
	if ans[2].Outcome != OutcomeRetrying || !ans[2].RetryAt.Equal(now.Add(5*time.Minute)) {
		t.Errorf("second attempt: %+v", ans[2])
	}
	if ans[3].Outcome != OutcomeNotFound || !ans[3].RetryAt.IsZero() {
		t.Errorf("last attempt is final: %+v", ans[3])
	}
}

func TestRenderRow(t *testing.T) {
	f := New(nil, nil)
	row := jobs.Row{Echo: `[" Jane","Doe","ACME.test"]`}
	render := func(ans *jobs.StoredAnswer) map[string]any {
		var buf bytes.Buffer
		f.RenderRow(&buf, row, ans)
		m := map[string]any{}
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", buf.String(), err)
		}
		return m
	}
	m := render(nil)
	if m["status"] != "pending" || m["substatus"] != "queued" || m["email"] != nil || m["first_name"] != " Jane" || m["domain"] != "ACME.test" {
		t.Errorf("unanswered row %v", m)
	}
	if m := render(&jobs.StoredAnswer{Outcome: OutcomeRetrying, Data: `{"status":"not_found"}`}); m["status"] != "pending" || m["substatus"] != "retrying" {
		t.Errorf("retrying row %v", m)
	}
	data, _ := json.Marshal(finder.Result{Status: finder.StatusNotFound, Substatus: finder.SubNoSuchDomain})
	m = render(&jobs.StoredAnswer{Outcome: OutcomeNotFound, Data: string(data)})
	for _, k := range []string{"email", "email_provider", "mx_record", "is_catch_all", "is_role", "is_free", "is_disposable", "confidence"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("not_found row: %s = %v (want null)", k, v)
		}
	}
	if m["substatus"] != "no_such_domain" || m["last_name"] != "Doe" {
		t.Errorf("not_found row %v", m)
	}
}

func FuzzLookupBody(f *testing.F) {
	for _, s := range []string{
		`{"input":[{"first_name":"Jane","last_name":"Doe","domain":"acme.test"}]}`,
		`{"input":[]}`, `{"input":[null,1,"x",{}]}`, `{"input":{}}`, `[]`,
		`{"input":[{"first_name":"Zoë","last_name":"van der Berg","domain":"https://www.bücher.example/x"}]}`,
		`{"input":[{"first_name":"a","last_name":"b","domain":"x"}],"input":[]}`,
		`{"input":[{"first_name":"a","last_name":"b","domain":"x"},{"first_name":"A ","last_name":" B","domain":"X"}]}`,
	} {
		f.Add([]byte(s))
	}
	fam := New(nil, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		b := jobs.NewBuilder(Name, 0)
		e := decodeBody(fam, bytes.NewReader(body), b)
		if e == nil {
			if b.Rows() == 0 || b.Rows() > MaxRows || b.Rows() != b.Distinct() {
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
