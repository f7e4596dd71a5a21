package apiserver_test

import "testing"

// Every bulk submission takes webhook_url, and the document's webhooks
// section describes the event and its headers (docs/webhooks.md).
func TestOpenAPIWebhooks(t *testing.T) {
	doc := newOpenAPIChecker(t, newTestAPI(t)).doc
	for _, name := range []string{"CompanyBulkRequest", "VerificationBulkRequest", "LookupBulkRequest"} {
		p := doc.Components.Schemas[name].Value.Properties["webhook_url"]
		if p == nil || p.Value.MaxLength == nil || *p.Value.MaxLength != 2048 || !p.Value.Type.Includes("null") {
			t.Errorf("%s: webhook_url %+v", name, p)
		}
	}
	item := doc.Webhooks["jobEvent"]
	if item == nil || item.Post == nil {
		t.Fatal("webhooks.jobEvent.post is not documented")
	}
	headers := map[string]bool{}
	for _, p := range item.Post.Parameters {
		if p.Value.In == "header" && p.Value.Required {
			headers[p.Value.Name] = true
		}
	}
	for _, h := range []string{"X-Bulkd-Event-Id", "X-Bulkd-Timestamp", "X-Bulkd-Signature"} {
		if !headers[h] {
			t.Errorf("webhook header %s not documented", h)
		}
	}
	ev := item.Post.RequestBody.Value.Content["application/json"].Schema.Value
	for _, f := range []string{"event_id", "type", "created_at", "job_id", "family", "status", "counts", "links"} {
		if ev.Properties[f] == nil {
			t.Errorf("event lacks %s", f)
		}
	}
}
