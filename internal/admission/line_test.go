package admission

import (
	"fmt"
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// placesByTurns is the estimate as the accounts' turns say it, counted
// turn by turn: the oracle of places.
func placesByTurns(lines [][]types.NamespacedName) map[types.NamespacedName]int32 {
	pos := map[types.NamespacedName]int32{}
	place := int32(0)
	for k := 0; ; k++ {
		any := false
		for _, l := range lines {
			if k < len(l) {
				place++
				pos[l[k]] = place
				any = true
			}
		}
		if !any {
			return pos
		}
	}
}

func TestPlacesAreTheAccountsTurns(t *testing.T) {
	rng := rand.New(rand.NewSource(27))
	for round := range 300 {
		lines := make([][]types.NamespacedName, rng.Intn(30))
		for i := range lines {
			for k := range rng.Intn([]int{1, 3, 40}[rng.Intn(3)]) {
				lines[i] = append(lines[i], types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("r", round, "-a", i, "-", k)})
			}
		}
		got, want := places(lines), placesByTurns(lines)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d places, want %d", round, len(got), len(want))
		}
		for key, p := range want {
			if got[key] != p {
				t.Fatalf("round %d: %s at place %d, want %d", round, key.Name, got[key], p)
			}
		}
	}
}

// BenchmarkPlaces: 5,000 BulkJobs in line over 500 accounts, the size of
// the KWOK bench's main wave (the previous estimate walked every account
// for every BulkJob: 2.5 million steps a pass).
func BenchmarkPlaces(b *testing.B) {
	rng := rand.New(rand.NewSource(27))
	lines := make([][]types.NamespacedName, 500)
	for i := range 5000 {
		a := rng.Intn(len(lines))
		lines[a] = append(lines[a], types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("bj-", i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		places(lines)
	}
}
