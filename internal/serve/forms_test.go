package serve

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/testredis"
)

// Every built-in family's form tells clients (bulkctl) the truth about
// its jobs: the family answers with that form (form.Builtin is the
// families' own, in order), the API mounts exactly the form's bulk
// endpoints, and a finished job's status carries the form's TotalField and
// says Final.
func TestBuiltinFormsMatchTheirFamilies(t *testing.T) {
	rdb, _ := testredis.Client(t)
	f, err := buildFamilies(config.Default(), rdb, slog.Default(), scope{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fams := f.registry.All()
	if len(fams) != len(form.Builtin) {
		t.Fatalf("%d families, %d built-in forms", len(fams), len(form.Builtin))
	}
	var mounts []string
	for i, fam := range fams {
		fm := fam.Form()
		if fm.Label != form.Builtin[i].Label {
			t.Errorf("family %s answers form %q, form.Builtin[%d] is %q", fam.Name(), fm.Label, i, form.Builtin[i].Label)
		}
		for _, m := range fm.Bulk {
			mounts = append(mounts, m.Path)
		}
		j := &jobs.Job{ID: "0c6d7e7e-1111-4222-8333-944445555666", Family: fam.Name(), Status: jobs.StatusCompleted,
			TotalRows: 3, Distinct: 3, RowsProcessed: 3, DistinctProcessed: 3, Outcomes: map[string]int64{},
			CreatedAt: time.Unix(0, 0).UTC(), CompletedAt: time.Unix(1, 0).UTC()}
		b, err := json.Marshal(fam.Status(j))
		if err != nil {
			t.Fatal(err)
		}
		var st map[string]any
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if _, ok := st[fm.TotalField]; !ok {
			t.Errorf("family %s: status %s has no %q (its form's TotalField)", fam.Name(), b, fm.TotalField)
		}
		if st["status"] != fm.Final {
			t.Errorf("family %s: a finished job's status is %v, its form's Final %q", fam.Name(), st["status"], fm.Final)
		}
	}
	var mounted []string
	for _, b := range f.bulk {
		mounted = append(mounted, "/v1"+b.Path)
	}
	if len(mounted) != len(mounts) {
		t.Fatalf("mounted %v, forms list %v", mounted, mounts)
	}
	for i := range mounts {
		if mounted[i] != mounts[i] {
			t.Errorf("mounted %v, forms list %v", mounted, mounts)
		}
	}
}
