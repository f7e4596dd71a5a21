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
	// too): the column names that mean its fields, its limits (MaxRows),
	// its body's shape, whether the server answers one row per unique
	// input (Dedupe: bulkctl drops repeats the same way before
	// splitting), and its status's TotalField and Final. bulkctl reads
	// them there, never a copy.
	Form form.Form
	// Unlimited: the family takes unlimited-plan keys (the others take
	// pay-as-you-go keys; SPEC 5).
	Unlimited bool
}

// Families are the bulk mounts of the forms bulkctl links, in the order a
// bare job id is looked for: the built-in families' (form.Builtin), the
// declarations the server mounts and the dashboard reads too. Everything
// bulkctl does with a family (its subcommand, help, columns, limits,
// dedupe, body, status fields, unlimited-plan mount) comes from its form:
// a program linking more forms sets Families = MountsOf(its forms).
var Families = MountsOf(form.Builtin)

// MountsOf is every bulk mount of forms, in order.
func MountsOf(forms []form.Form) []*Family {
	var out []*Family
	for _, fm := range forms {
		for _, m := range fm.Bulk {
			out = append(out, &Family{Kind: m.Name, Path: m.Path, Form: fm, Unlimited: m.Unlimited})
		}
	}
	return out
}

// Commands are the families a subcommand submits to ("bulkctl KIND
// submit FILE"): each form's first mount.
func Commands() []*Family {
	var out []*Family
	seen := map[string]bool{}
	for _, f := range Families {
		if k := f.Form.Bulk[0].Path; !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}

// command is the family of subcommand name, if there is one.
func command(name string) (*Family, bool) {
	for _, f := range Commands() {
		if f.Kind == name {
			return f, true
		}
	}
	return nil, false
}

// unlimitedOf is the mount of f's form that takes unlimited-plan keys
// (f itself when it does; nil: none).
func unlimitedOf(f *Family) *Family {
	for _, o := range Families {
		if o.Form.Bulk[0].Path == f.Form.Bulk[0].Path && o.Unlimited {
			return o
		}
	}
	return nil
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
