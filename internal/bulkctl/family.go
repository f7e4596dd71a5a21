package bulkctl

import (
	"fmt"

	"github.com/bulkd/bulkd/internal/family/form"
)

// Family is one bulk API of bulkd as bulkctl uses it.
type Family struct {
	// Kind is the family's name in job handles and manifests.
	Kind string
	// Path is the bulk mount: POST Path, GET Path/{job_id}[/results].
	Path string
	// Form is the family's form (internal/family/form, the dashboard's
	// too): the column names that mean its fields, its limits, and its
	// body's shape.
	Form form.Form
	// MaxRows is the most rows one submission takes (the server family's
	// MaxRows()).
	MaxRows int
	// TotalField is the status field with the job's number of result
	// rows.
	TotalField string
	// Final is the status of a finished job.
	Final string
	// Dedupe: the server answers one row per unique input (so bulkctl
	// drops repeats before splitting, the same way), rather than one row
	// per submitted row.
	Dedupe bool
	// Unlimited: the family takes unlimited-plan keys (the others take
	// pay-as-you-go keys; SPEC 5).
	Unlimited bool
}

// The families (paths from apiserver/openapi.yaml, limits from each
// family's MaxRows).
var (
	Company = &Family{Kind: "company", Path: "/v1/company-enrichment/bulk", Form: form.Company,
		MaxRows: 100_000, TotalField: "total_rows", Final: "completed"}
	Verify = &Family{Kind: "verify", Path: "/v1/bulk", Form: form.Verification,
		MaxRows: 100_000, TotalField: "total_emails", Final: "complete", Dedupe: true}
	Lookup = &Family{Kind: "lookup", Path: "/v1/bulk-lookup", Form: form.Lookup,
		MaxRows: 10_000, TotalField: "total_rows", Final: "completed", Dedupe: true}
	UnlimitedLookup = &Family{Kind: "unlimited-lookup", Path: "/v1/unlimited/bulk-lookup", Form: form.Lookup,
		MaxRows: 10_000, TotalField: "total_rows", Final: "completed", Dedupe: true, Unlimited: true}
)

// Families in the order a bare job id is looked for.
var Families = []*Family{Company, Verify, Lookup, UnlimitedLookup}

// FamilyByKind finds a family by its handle name.
func FamilyByKind(kind string) (*Family, error) {
	for _, f := range Families {
		if f.Kind == kind {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unknown family %q (want company, verify, lookup or unlimited-lookup)", kind)
}

// maxBodyBytes bounds one submission's body, well under the server's
// default --max-body-bytes (64 MiB).
const maxBodyBytes = 32 << 20
