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
	pos := map[types.NamespacedName]int32{}
	for i, acct := range accts {
		for k, q := range byAccount[acct] {
			ahead := 0
			for j, other := range accts {
				n := k // every account ahead in turn order gets k+1 turns before this one, others k
				if j < i {
					n = k + 1
				}
				if j != i {
					ahead += min(len(byAccount[other]), n)
				}
			}
			pos[q.key] = int32(ahead + k + 1)
		}
	}
	a.mu.Lock()
	for key, p := range pos {
		if a.positions[key] != p {
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
