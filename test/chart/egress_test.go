package chart

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/egress"
)

// The SMTP egress values (docs/egress.md): the HELO name and MAIL FROM in
// the ConfigMap, the egresses in a Secret of their own (a proxy URL may
// carry a password), loaded by the API pods and handed by the controller
// to the processor pods; the rendered form is what bulkd parses.
func init() {
	scenarios = append(scenarios, scenario{
		name:      "smtp-egress",
		release:   "bulkd",
		namespace: "chart-smtp-egress",
		values: `
redis:
  url: redis://redis.example.com:6379/0
smtpEgress:
  helo: verify.example.com
  mailFrom: bounces@example.com
  egresses:
    - {name: dc1, source: 203.0.113.5, helo: dc1.example.com}
    - {name: px, proxy: "socks5://bulkd:s3cr%3Bet@10.30.0.9:1080", helo: px.example.com, publicIP: 198.51.100.7}
networkPolicy:
  allowEgress: [{cidrs: [10.30.0.9/32], ports: [1080]}]
`,
		check: func(t *testing.T, r *rendered, s scenario) {
			cm := r.get(t, "ConfigMap", "bulkd-config")
			data := asMap(cm.Object["data"])
			if data["BULKD_SMTP_HELO"] != "verify.example.com" || data["BULKD_SMTP_MAIL_FROM"] != "bounces@example.com" {
				t.Errorf("ConfigMap SMTP settings: %v", data)
			}
			for _, o := range r.ofKind("ConfigMap") {
				b, _ := json.Marshal(o.Object)
				if strings.Contains(string(b), "s3cr") {
					t.Errorf("ConfigMap %s carries the proxy password", o.GetName())
				}
			}
			sec := r.get(t, "Secret", "bulkd-smtp-egress")
			raw, err := base64.StdEncoding.DecodeString(asMap(sec.Object["data"])["BULKD_SMTP_EGRESS"].(string))
			if err != nil {
				t.Fatal(err)
			}
			want := "name=dc1,helo=dc1.example.com,source=203.0.113.5;name=px,helo=px.example.com,proxy=socks5://bulkd:s3cr%3Bet@10.30.0.9:1080,public_ip=198.51.100.7"
			if string(raw) != want {
				t.Errorf("BULKD_SMTP_EGRESS %q, want %q", raw, want)
			}
			egs, err := egress.Parse(egress.Flags{Helo: "verify.example.com", Egress: string(raw)})
			if err != nil || len(egs) != 2 || egs[1].Proxy == nil || egs[1].PublicIP.String() != "198.51.100.7" {
				t.Errorf("bulkd parses the rendered egresses as %v, %v", egs, err)
			}
			api := containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0]
			found := false
			for _, ef := range asSlice(api["envFrom"]) {
				found = found || asMap(asMap(ef)["secretRef"])["name"] == "bulkd-smtp-egress"
			}
			if !found {
				t.Errorf("apiserver envFrom %v lacks the egress Secret", api["envFrom"])
			}
			ctl := containers(t, r.get(t, "Deployment", "bulkd-controller"))[0]
			if envOf(ctl)["BULKD_PROCESSOR_SECRET"]["value"] != "bulkd-smtp-egress" {
				t.Errorf("controller BULKD_PROCESSOR_SECRET %v", envOf(ctl)["BULKD_PROCESSOR_SECRET"])
			}
		},
	})
}
