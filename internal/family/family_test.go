package family_test

import (
	"slices"
	"testing"

	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/verification"
)

// Each family declares its error outcome for failed shards (ErrorAnswer):
// what the processor records for a failed shard's unanswered rows and what
// the controller's ShardsFailed condition names.
func TestRegistryErrorOutcomes(t *testing.T) {
	r := family.NewRegistry(enrich.NewFamily(nil, &enrich.Answerer{}), verification.New(nil, nil), lookup.New(nil, nil))
	for name, want := range map[string]string{"company_enrichment": "error", "email_verification": "unknown", "email_lookup": "not_found"} {
		if got, ok := r.ErrorOutcome(name); !ok || got != want {
			t.Errorf("%s: error outcome %q %v, want %q", name, got, ok, want)
		}
	}
	if _, ok := r.ErrorOutcome("phone_lookup"); ok {
		t.Error("an unregistered family has an error outcome")
	}
	if got := r.Names(); !slices.Equal(got, []string{"company_enrichment", "email_verification", "email_lookup"}) {
		t.Errorf("names %v", got)
	}
}

// A family whose name the BulkJob CRD would refuse is a wiring bug.
func TestRegistryRefusesAMalformedName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	family.NewRegistry(named{lookup.New(nil, nil), "Phone-Lookup"})
}

type named struct {
	family.Family
	name string
}

func (n named) Name() string { return n.name }
