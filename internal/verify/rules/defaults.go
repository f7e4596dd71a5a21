package rules

import (
	"strings"
	"sync"
)

// defaults is the compiled-in table. None of these providers publishes the
// numbers a verifying client should keep to; they are conservative choices
// from how the servers are known to behave, and any of them can be
// overridden with `bulkd admin smtp-rules set`.
//
//   - Sessions per server address are left to --smtp-sessions-per-host (3)
//     except for the filtering gateways and providers known to answer 421
//     early (Yahoo's "421 4.7.0 [TSS04]", Proofpoint, Mimecast: 2).
//   - provider_sessions caps one egress's sessions over all the provider's
//     addresses: the big hosted services count a client's connections over
//     their whole fleet; 30 for Google and Microsoft, 10 for the others.
//   - rcpts: Google answers 452 4.5.3 beyond 100 recipients in a message,
//     Microsoft's front ends throttle large recipient lists; the filtering
//     gateways check each recipient against the customer's directory, so
//     fewer per session (20) keep their replies fast.
//   - timeout: the gateways' RCPT replies wait on that directory check;
//     30 s instead of the verifier's 10 s, so a slow reply is not taken
//     for a tarpit.
//   - probe=no only where the MX names serve consumer mailboxes of one
//     provider that refuses unknown recipients at RCPT and has no
//     catch-all: gmail.com (gmail-smtp-in.l.google.com; Google Workspace
//     domains use aspmx.l.google.com and may be catch-all, so they are
//     probed) and outlook.com/hotmail.com (*.olc.protection.outlook.com;
//     business tenants on *.mail.protection.outlook.com may turn off
//     directory-based edge blocking and then accept everything, so they are
//     probed). Yahoo is probed: its servers accept some recipients they
//     bounce later, which the probe shows as catch-all.
const defaults = `
google.com                  provider=google provider_sessions=30 rcpts=100
googlemail.com              provider=google provider_sessions=30 rcpts=100
gmail-smtp-in.l.google.com  provider=google provider_sessions=30 rcpts=100 probe=no
protection.outlook.com      provider=microsoft provider_sessions=30 rcpts=50
olc.protection.outlook.com  provider=microsoft provider_sessions=30 rcpts=50 probe=no
outlook.com                 provider=microsoft provider_sessions=30 rcpts=50
hotmail.com                 provider=microsoft provider_sessions=30 rcpts=50
office365.us                provider=microsoft provider_sessions=30 rcpts=50
yahoodns.net                provider=yahoo sessions=2 provider_sessions=10 rcpts=20 timeout=30s
yahoo.com                   provider=yahoo sessions=2 provider_sessions=10 rcpts=20 timeout=30s
icloud.com                  provider=apple provider_sessions=10 rcpts=50
me.com                      provider=apple provider_sessions=10 rcpts=50
pphosted.com                provider=proofpoint sessions=2 provider_sessions=10 rcpts=20 timeout=30s
ppe-hosted.com              provider=proofpoint sessions=2 provider_sessions=10 rcpts=20 timeout=30s
mimecast.com                provider=mimecast sessions=2 provider_sessions=10 rcpts=20 timeout=30s
mimecast.co.za              provider=mimecast sessions=2 provider_sessions=10 rcpts=20 timeout=30s
mimecast-offshore.com       provider=mimecast sessions=2 provider_sessions=10 rcpts=20 timeout=30s
messagelabs.com             provider=broadcom sessions=2 provider_sessions=10 rcpts=20 timeout=30s
barracudanetworks.com       provider=barracuda sessions=2 provider_sessions=10 rcpts=20 timeout=30s
secureserver.net            provider=godaddy provider_sessions=10
zoho.com                    provider=zoho provider_sessions=10
zoho.eu                     provider=zoho provider_sessions=10
yandex.net                  provider=yandex provider_sessions=10
mail.ru                     provider=mailru provider_sessions=10
gmx.net                     provider=gmx provider_sessions=10
web.de                      provider=gmx provider_sessions=10
protonmail.ch               provider=proton provider_sessions=10
`

var (
	defaultOnce  sync.Once
	defaultRules []Rule
)

// Default returns the compiled-in rules.
func Default() []Rule {
	defaultOnce.Do(func() {
		r, err := Parse(strings.NewReader(defaults))
		if err != nil {
			panic("rules: the compiled-in table: " + err.Error())
		}
		defaultRules = r
	})
	return append([]Rule(nil), defaultRules...)
}

// DefaultTable is the compiled-in rules alone.
func DefaultTable() *Table { return NewTable(Default(), nil) }
