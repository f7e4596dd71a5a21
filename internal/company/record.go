package company

import (
	"hash/fnv"
	"strings"
)

// MaxNetworkID is the largest network_id the package accepts or derives:
// 2^53-1, the largest integer every JSON client (JavaScript included) can
// represent exactly.
const MaxNetworkID int64 = 1<<53 - 1

// Record is one company. Its JSON encoding is exactly the data fields of a
// SPEC 2.4 company result row, in spec order; nil pointers encode as null.
// Call Normalize before encoding a Record built by hand so the two array
// fields encode as [] rather than null; every Record the package returns is
// already normalized.
//
// A normalized zero Record is the data part of a row with no company (all
// null, both arrays empty); a not_found row built from a valid network URL
// sets NetworkURL on it.
//
// Record deliberately has no MarshalJSON method: the job engine embeds it in
// the full result row, and a promoted MarshalJSON would silently swallow the
// row's own fields.
type Record struct {
	NetworkURL       *string          `json:"network_url"`
	NetworkID        *int64           `json:"network_id"`
	Name             *string          `json:"name"`
	Description      *string          `json:"description"`
	Website          *string          `json:"website"`
	Domain           *string          `json:"domain"`
	EmailDomain      *string          `json:"email_domain"`
	Industry         *string          `json:"industry"`
	CompanySize      *CompanySize     `json:"company_size"`
	EmployeeCount    *int             `json:"employee_count"`
	CompanyType      *string          `json:"company_type"`
	Headquarters     *Headquarters    `json:"headquarters"`
	FoundedYear      *int             `json:"founded_year"`
	Specialties      []string         `json:"specialties"`
	FollowerCount    *int             `json:"follower_count"`
	SimilarCompanies []SimilarCompany `json:"similar_companies"`
}

// CompanySize is a self-reported headcount range (SPEC 2.6). Min and Max
// are inclusive; Max is nil for open-ended ranges such as "10001+".
type CompanySize struct {
	Label *string `json:"label"`
	Min   *int    `json:"min"`
	Max   *int    `json:"max"`
}

// Headquarters is where a company is based (SPEC 2.6). The spec names the
// fields but not their types; bulkd makes each one a string or null. Text is
// the human-readable form, normally the non-empty parts joined with ", ".
type Headquarters struct {
	Text    *string `json:"text"`
	City    *string `json:"city"`
	Region  *string `json:"region"`
	Country *string `json:"country"`
}

// SimilarCompany is one entry of similar_companies (SPEC 2.6).
type SimilarCompany struct {
	Name       *string `json:"name"`
	NetworkURL *string `json:"network_url"`
	Industry   *string `json:"industry"`
	Location   *string `json:"location"`
}

// Normalize makes the array fields non-nil so they encode as [] (the spec
// says "empty when unknown", never null).
func (r *Record) Normalize() {
	if r.Specialties == nil {
		r.Specialties = []string{}
	}
	if r.SimilarCompanies == nil {
		r.SimilarCompanies = []SimilarCompany{}
	}
}

// DeriveNetworkID returns a stable network_id for a company whose source
// has no numeric id: FNV-1a 64 of the canonical network URL, masked to 53
// bits so it stays JSON-safe. It is never 0. The value is part of the data
// contract (re-imports must produce the same id), so the function must not
// change.
//
// With 53 bits, the chance that two of 1,000,000 companies collide is about
// 5e-5; a collision makes the later record replace the earlier one.
func DeriveNetworkID(canonNetworkURL string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(canonNetworkURL)) // hash.Hash never returns an error
	id := int64(h.Sum64() & uint64(MaxNetworkID))
	if id == 0 {
		id = 1
	}
	return id
}

// deriveDomainNetworkID gives a company known only by its website domain a
// stable id. The "domain:" prefix keeps it from ever equalling the id of a
// network URL that happens to be the same string.
func deriveDomainNetworkID(canonDomain string) int64 {
	return DeriveNetworkID("domain:" + canonDomain)
}

// nonEmpty returns a pointer to the trimmed s, or nil when nothing is left,
// so blank source values become null rather than "".
func nonEmpty(s string) *string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return &s
}
