package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/webhook"
)

// webhookField is the optional webhook_url of every bulk submission body
// (docs/webhooks.md).
const webhookField = "webhook_url"

// webhookBody is a submission body whose webhook_url the families' decoders
// (apierr.ListBody) hand over as they stream past it: the body is read
// once, whatever the family.
type webhookBody struct {
	io.Reader
	b    *jobs.Builder
	seen bool
	set  bool // a URL was given (not null)
	url  string
}

// Field implements apierr.OtherFields.
func (w *webhookBody) Field(name string, dec *json.Decoder) (bool, *apierr.Error) {
	if name != webhookField {
		return false, nil
	}
	if w.seen {
		return true, apierr.New(http.StatusBadRequest, `Malformed JSON body: the "webhook_url" field appears more than once.`)
	}
	w.seen = true
	var s *string
	if err := dec.Decode(&s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return true, apierr.Unprocessable(apierr.Item{Loc: "body." + webhookField, Type: apierr.TypeStringType, Msg: "Input should be a valid string"})
		}
		return true, apierr.FromJSON(err)
	}
	if s != nil { // null is no webhook
		w.url, w.set = *s, true
	}
	return true, nil
}

// check validates the body's webhook_url once it is decoded (SSRF rules of
// webhook.Policy, its host resolved now, within the policy's resolution
// timeout, or until the request ends) and puts it on the builder: a 422 like the families' when it is
// refused.
func (w *webhookBody) check(ctx context.Context, p *webhook.Policy) *apierr.Error {
	if !w.set {
		return nil
	}
	if p == nil {
		p = &webhook.Policy{}
	}
	if prob := p.CheckURL(ctx, w.url); prob != nil {
		return apierr.Unprocessable(apierr.Item{Loc: "body." + webhookField, Type: prob.Type, Msg: prob.Msg})
	}
	w.b.WebhookURL = w.url
	return nil
}
