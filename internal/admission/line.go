package admission

import (
	"cmp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// publish computes the places in line of the Queued BulkJobs and wakes
// the BulkJobs whose place changed, and those in touched.
func (a *Admitter) publish(v *admissionView, touched map[types.NamespacedName]bool) {
	// A BulkJob is in line while its shard Job waits to start.
	type queued struct {
		key   types.NamespacedName
		order int64
	}
	byAccount := map[string][]queued{}
	for uid, jv := range v.jobs {
		if sl := a.slots[startKey(uid)]; jv.retry || !ptrTrue(jv.job.Spec.Suspend) || sl != nil && sl.job == uid {
			continue
		}
		byAccount[jv.account] = append(byAccount[jv.account], queued{types.NamespacedName{Namespace: jv.bj.Namespace, Name: jv.bj.Name}, jv.order})
	}
	running := map[string]int{}
	for _, sl := range a.slots {
		running[sl.account]++
	}
	accts := make([]string, 0, len(byAccount))
	for acct, q := range byAccount {
		slices.SortFunc(q, func(x, y queued) int {
			if x.order != y.order {
				return cmp.Compare(x.order, y.order)
			}
			return cmp.Compare(x.key.String(), y.key.String())
		})
		accts = append(accts, acct)
	}
	// The estimate: accounts take turns, one BulkJob each, those running
	// fewer shards (newcomers) first, then the one waiting longest.
	slices.SortFunc(accts, func(x, y string) int {
		if running[x] != running[y] {
			return running[x] - running[y]
		}
		if c := cmp.Compare(byAccount[x][0].order, byAccount[y][0].order); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	lines := make([][]types.NamespacedName, len(accts))
	for i, acct := range accts {
		for _, q := range byAccount[acct] {
			lines[i] = append(lines[i], q.key)
		}
	}
	pos := places(lines)
	a.mu.Lock()
	for key, p := range pos {
		// A place given, or moved among the first wakeFirstPlaces, wakes its
		// BulkJob (its write is paced like progress); a farther move waits
		// for the BulkJob's own next pass (its resync). Waking every
		// BulkJob in line at each admission cost a reconcile per queued
		// BulkJob per pass: 67 reconciles per BulkJob with 5,000 in line
		// (docs/benchmarks.md).
		if old, ok := a.positions[key]; !ok || old != p && min(old, p) <= wakeFirstPlaces {
			touched[key] = true
		}
	}
	for key := range a.positions {
		if _, ok := pos[key]; !ok {
			touched[key] = true
		}
	}
	a.positions = pos
	a.mu.Unlock()
	for key := range touched {
		bj := &v1alpha1.BulkJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		select {
		case a.events <- event.GenericEvent{Object: bj}:
		default: // full: the BulkJob's own events and resync come later
		}
	}
}

// wakeFirstPlaces is how many places at the head of the line are kept
// fresh: a move among them wakes the BulkJob.
const wakeFirstPlaces = 100

// places is each BulkJob's place in line (1: next), estimated as accounts
// taking turns, one BulkJob each, in the order of lines (each account's
// BulkJobs, in its order): the k-th BulkJob (from 0) of the i-th account
// has ahead of it min(len, k+1) BulkJobs of every account before i in
// turn order and min(len, k) of every account after it.
//
// It costs O(n log m) for n BulkJobs in line and m the longest line,
// not O(n × accounts): written as
// ahead = Σ_{j≠i} min(len_j, k) + #{j < i : len_j > k},
// the first sum is all(k) - min(len_i, k), with all(k) = Σ_j min(len_j, k)
// precomputed for every k, and the count comes from a Fenwick tree of the
// lengths of the accounts already passed.
func places(lines [][]types.NamespacedName) map[types.NamespacedName]int32 {
	longest, n := 0, 0
	for _, l := range lines {
		longest, n = max(longest, len(l)), n+len(l)
	}
	// longer[k] = #{j : len_j > k}; all[k] = Σ_j min(len_j, k) = Σ_{t<k} longer[t].
	longer := make([]int, longest+1)
	for _, l := range lines {
		for k := 0; k < len(l); k++ {
			longer[k]++
		}
	}
	all := make([]int, longest+1)
	for k := 1; k <= longest; k++ {
		all[k] = all[k-1] + longer[k-1]
	}
	passed := newFenwick(longest + 1) // the lengths of the accounts before i
	pos := make(map[types.NamespacedName]int32, n)
	for _, l := range lines {
		for k, key := range l {
			ahead := all[k] - min(len(l), k) + passed.countAbove(k)
			pos[key] = int32(ahead + k + 1)
		}
		passed.add(len(l))
	}
	return pos
}

// fenwick counts lengths: add one, count those above k.
type fenwick struct {
	tree  []int
	total int
}

func newFenwick(size int) *fenwick { return &fenwick{tree: make([]int, size+1)} }

func (f *fenwick) add(v int) {
	f.total++
	for i := v + 1; i < len(f.tree); i += i & -i {
		f.tree[i]++
	}
}

// countAbove is how many added values are greater than k.
func (f *fenwick) countAbove(k int) int {
	atMost := 0
	for i := min(k+1, len(f.tree)-1); i > 0; i -= i & -i {
		atMost += f.tree[i]
	}
	return f.total - atMost
}
