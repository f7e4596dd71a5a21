package apiserver

import (
	"context"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
	"github.com/bulkd/bulkd/internal/webhook"
)

// checkWebhook validates a submission's webhook_url once its body is
// decoded (jsonbody.Decode reads it, for every family: the body is read
// once), by the SSRF rules of webhook.Policy (its host resolved now,
// within the policy's resolution timeout, or until the request ends), and
// puts it on the builder: a 422 like the families' when it is refused.
func checkWebhook(ctx context.Context, p *webhook.Policy, sub jsonbody.Submission, b *jobs.Builder) *apierr.Error {
	if sub.WebhookURL == nil {
		return nil
	}
	if p == nil {
		p = &webhook.Policy{}
	}
	url := *sub.WebhookURL
	if prob := p.CheckURL(ctx, url); prob != nil {
		return apierr.Unprocessable(apierr.Item{Loc: "body." + jsonbody.WebhookField, Type: prob.Type, Msg: prob.Msg})
	}
	b.WebhookURL = url
	return nil
}
