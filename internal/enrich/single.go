package enrich

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

var _ family.Single = (*CompanyFamily)(nil)

// SinglePrice implements family.Single.
func (f *CompanyFamily) SinglePrice() credits.Amount { return Price }

// ParseSingle implements family.Single: the single lookup (SPEC 4.6 leaves
// its shape to us): query network_url or domain, the same row shape as a
// bulk result, 1 credit for a valid input, nothing for an invalid one.
func (f *CompanyFamily) ParseSingle(req family.SingleRequest) (family.SingleCall, *apierr.Error) {
	q := req.Query
	var nu, dm *string
	var v apierr.Validation
	for _, fld := range []struct {
		name string
		dst  **string
	}{{"network_url", &nu}, {"domain", &dm}} {
		if !q.Has(fld.name) {
			continue
		}
		val := q.Get(fld.name)
		if jsonbody.OverChars(val, MaxValueLen) {
			v.Add("query."+fld.name, apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", MaxValueLen))
			continue
		}
		*fld.dst = &val
	}
	if nu == nil && dm == nil && v.Empty() {
		v.Add("query.network_url", apierr.TypeMissing, "Either network_url or domain is required")
	}
	if e := v.Err(); e != nil {
		return family.SingleCall{}, e
	}
	echo, in, reason := Classify(f.Normalizer, nu, dm)
	row := jobs.Row{Echo: echo, Index: -1, Reason: reason}
	if reason != "" {
		// Not a company input: answered as its bulk row would be, free.
		return family.SingleCall{Free: true, Answer: func(context.Context, credits.Amount) (family.SingleAnswer, error) {
			return family.SingleAnswer{Body: f.singleRow(row, nil)}, nil
		}}, nil
	}
	row.Index, row.First = 0, true
	return family.SingleCall{Answer: func(ctx context.Context, _ credits.Amount) (family.SingleAnswer, error) {
		answers, err := f.Answer(ctx, []string{in.Key})
		if err != nil {
			// The company store failed (SPEC 2.10: 500, the credit
			// refunded), not the service's own Redis: that would have
			// failed the charge first.
			return family.SingleAnswer{}, err
		}
		ans := &jobs.StoredAnswer{Outcome: answers[0].Outcome, Data: string(answers[0].Data)}
		return family.SingleAnswer{Body: f.singleRow(row, ans), Keep: true}, nil
	}}, nil
}

// singleRow is the single lookup's answer: the row as a bulk result shows
// it.
func (f *CompanyFamily) singleRow(row jobs.Row, ans *jobs.StoredAnswer) json.RawMessage {
	var buf bytes.Buffer
	RenderRow(&buf, row, ans, f.price)
	return buf.Bytes()
}
