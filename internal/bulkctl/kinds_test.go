package bulkctl

// The built-in mounts the package's own tests name.
var (
	Company = mustKind("company")
	Verify  = mustKind("verify")
	Lookup  = mustKind("lookup")
)

// mustKind is FamilyByKind for a mount a test cannot work without.
func mustKind(kind string) *Family {
	f, err := FamilyByKind(kind)
	if err != nil {
		panic("bulkctl: " + err.Error())
	}
	return f
}
