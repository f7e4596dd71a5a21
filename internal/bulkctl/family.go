package bulkctl

import (
	"fmt"
	"strings"

	"github.com/bulkd/bulkd/internal/family/form"
)

// Family is one bulk API of bulkd as bulkctl uses it.
type Family struct {
	// Kind is the mount's name in job handles and manifests (its
	// form.Mount's Name).
	Kind string
	// Path is the bulk mount: POST Path, GET Path/{job_id}[/results].
	Path string
	// Form is the family's form (internal/family/form, the dashboard's
	// too): the column names that mean its fields, its limits, and its
	// body's shape.
	Form form.Form
	// MaxRows is the most rows one submission takes (the server family's
	// MaxRows(), which its form repeats).
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

// Families are the built-in families' bulk mounts, in the order a bare
// job id is looked for: everything about them is their forms'
// (internal/family/form), the declarations the server mounts and the
// dashboard reads too.
var Families = mountsOf(form.Builtin)

// The mounts bulkctl names in its own logic (the lookup's automatic
// switch to the unlimited mount, the per-family subcommands).
var (
	Company         = mustKind("company")
	Verify          = mustKind("verify")
	Lookup          = mustKind("lookup")
	UnlimitedLookup = mustKind("unlimited-lookup")
)

// mountsOf is every bulk mount of forms, in order.
func mountsOf(forms []form.Form) []*Family {
	var out []*Family
	for _, fm := range forms {
		for _, m := range fm.Bulk {
			out = append(out, &Family{Kind: m.Name, Path: m.Path, Form: fm, MaxRows: fm.MaxRows,
				TotalField: fm.TotalField, Final: fm.Final, Dedupe: fm.Dedupe, Unlimited: m.Unlimited})
		}
	}
	return out
}

// mustKind is FamilyByKind for a mount bulkctl cannot work without.
func mustKind(kind string) *Family {
	f, err := FamilyByKind(kind)
	if err != nil {
		panic("bulkctl: " + err.Error())
	}
	return f
}

// FamilyByKind finds a family by its handle name.
func FamilyByKind(kind string) (*Family, error) {
	names := make([]string, len(Families))
	for i, f := range Families {
		if f.Kind == kind {
			return f, nil
		}
		names[i] = f.Kind
	}
	return nil, fmt.Errorf("unknown family %q (want %s)", kind, orList(names))
}

// orList is "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// maxBodyBytes bounds one submission's body, well under the server's
// default --max-body-bytes (64 MiB).
const maxBodyBytes = 32 << 20
