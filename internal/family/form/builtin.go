package form

import "strings"

// The built-in families' forms (see the package comment for why they are
// declared here). The aliases are the dashboard's and bulkctl's former
// tables merged, normalized, best first; the paths are apiserver/openapi.yaml's.
var (
	// Company is company enrichment's form (internal/enrich).
	Company = Form{
		Label: "Company enrichment",
		Hint:  "Companies by professional-network company URL or website domain. 1 credit per distinct company.",
		Fields: []Field{
			{Name: "network_url", Label: "Company network URL", MaxLen: 2048, Looks: LooksLikeNetworkURL,
				Aliases: []string{"networkurl", "linkedinurl", "linkedin", "companylinkedinurl", "linkedincompanyurl", "companylinkedin",
					"companyurl", "profileurl", "url"}},
			{Name: "domain", Label: "Website or domain", MaxLen: 2048, Looks: looksLikeDomain,
				Aliases: []string{"domain", "companydomain", "website", "companywebsite", "websiteurl", "site", "homepage", "web"}},
		},
		ListField:  "input",
		Default:    "domain",
		Bulk:       []Mount{{Name: "company", Path: "/v1/company-enrichment/bulk"}},
		MaxRows:    100_000,
		TotalField: "total_rows",
		Final:      "completed",
		TooMany:    Refusal{Type: "too_long", Msg: "List should have at most {max} items"},
		Empty:      Refusal{Type: "too_short", Msg: "List should have at least 1 item after validation, not 0"},
		NoValid:    Refusal{Type: "value_error", Msg: "No valid row: all {rows} rows are invalid"},
	}
	// Verification is email verification's form (internal/verification).
	Verification = Form{
		Label: "Email verification",
		Hint:  "Verify addresses. 0.2 credits per distinct address; unknown results are refunded when the job completes.",
		Fields: []Field{
			{Name: "email", Label: "Email address", MinLen: 3, MaxLen: 320, Looks: func(v string) bool { return strings.Contains(v, "@") },
				Fold:    FoldAddress,
				Aliases: []string{"email", "emailaddress", "mail", "address", "email1", "workemail", "value"}},
		},
		ListField:  "emails",
		Scalar:     true,
		Default:    "email",
		Bulk:       []Mount{{Name: "verify", Path: "/v1/bulk"}},
		MaxRows:    100_000,
		Dedupe:     true,
		TotalField: "total_emails",
		Final:      "complete",
		TooMany:    Refusal{Msg: "Too many emails: at most {max} per submission."},
		Empty:      Refusal{Msg: "The emails list is empty: at least one email is required."},
	}
	// Lookup is email lookup's form (internal/lookup).
	Lookup = Form{
		Label: "Email lookup",
		Hint:  "Find addresses from first name, last name and company domain. 1 credit, or one daily search, per distinct person.",
		Fields: []Field{
			{Name: "first_name", Label: "First name", MaxLen: 255,
				Aliases: []string{"firstname", "first", "givenname", "fname", "forename"}},
			{Name: "last_name", Label: "Last name", MaxLen: 255,
				Aliases: []string{"lastname", "last", "surname", "familyname", "lname"}},
			{Name: "domain", Label: "Domain", MaxLen: 255,
				Aliases: []string{"domain", "companydomain", "website", "companywebsite", "websiteurl", "url", "companyurl", "emaildomain", "site"}},
		},
		AllRequired: true,
		ListField:   "input",
		Bulk: []Mount{{Name: "lookup", Path: "/v1/bulk-lookup"},
			{Name: "unlimited-lookup", Path: "/v1/unlimited/bulk-lookup", Unlimited: true}},
		MaxRows:    10_000,
		Dedupe:     true,
		TotalField: "total_rows",
		Final:      "completed",
		TooMany:    Refusal{Type: "too_long", Msg: "List should have at most {max} items"},
		Empty:      Refusal{Msg: "The input list is empty: send 1 to {max} rows."},
	}
)

// FoldAddress is how an address is compared for dedupe on the client
// side: trimmed, the domain in lower case and the local part too unless
// it is quoted. The server merges everything this merges (and more: IDN
// forms), so dropping these repeats before a split changes neither the
// charge nor the results.
func FoldAddress(v string) string {
	v = strings.TrimSpace(v)
	at := strings.LastIndexByte(v, '@')
	if at < 0 {
		return strings.ToLower(v)
	}
	local, domain := v[:at], strings.ToLower(v[at+1:])
	if !strings.HasPrefix(local, `"`) {
		local = strings.ToLower(local)
	}
	return local + "@" + domain
}

// LooksLikeNetworkURL: a professional-network company URL rather than a
// website.
func LooksLikeNetworkURL(v string) bool {
	lc := strings.ToLower(v)
	return strings.Contains(lc, "/company/") || strings.Contains(lc, "linkedin.")
}

func looksLikeDomain(v string) bool { return strings.Contains(v, ".") && !strings.Contains(v, " ") }

// Builtin are the built-in families' forms, in the order bulkctl looks a
// bare job id up in (and the API mounts them).
var Builtin = []Form{Company, Verification, Lookup}
