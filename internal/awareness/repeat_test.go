package awareness

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// repeatOracle is repeatFilter as it is specified: per pair, the Notice.IDs of the last
// sentPerPair notices sent, a notice with one of them dropped.
type repeatOracle map[string][]string

func (o repeatOracle) accept(n *Notice) bool {
	pair := n.Watcher + "\x00" + n.Target.AgentID + "\x00" + n.Target.Key
	id := n.ID()
	if slices.Contains(o[pair], id) {
		return false
	}
	ids := append(o[pair], id)
	if len(ids) > sentPerPair {
		ids = ids[1:]
	}
	o[pair] = ids
	return true
}

// The repeat filter of a notice subscription drops exactly what the ID-based rule
// drops (NTC-5: no notice twice on one subscription), over random streams of repeats,
// stale copies, closed items and openings a nanosecond or a millisecond apart, on up
// to fewPairs pairs (odd rounds: more, the filter's map).
func TestRepeatFilterMatchesNoticeIDs_NTC5(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var f repeatFilter
		oracle := repeatOracle{}
		for i := range 600 {
			n := Notice{
				Watcher:      []string{"agent:a:main", "agent:b:main", "agent:c:main"}[rng.IntN(2+round%2)],
				Target:       SessionRef{AgentID: []string{"x", "y"}[rng.IntN(2)], Key: []string{"agent:x:main", "global"}[rng.IntN(2)]},
				ChangesSince: int64(rng.IntN(8)),
				OpenedAt:     at.Add(time.Duration(rng.IntN(3))*time.Millisecond + time.Duration(rng.IntN(3))),
				Closed:       rng.IntN(4) == 0,
			}
			if got, want := f.accept(&n), oracle.accept(&n); got != want {
				t.Fatalf("round %d, notice %d %+v: accepted %v, want %v", round, i, n, got, want)
			}
		}
	}
}

// BenchmarkRepeatFilter is a subscription's first notice on a pair (a broadcast
// reaches each subscription so), each filter kept as a subscription keeps it: the
// filter (stamps) and the ID rule it implements (ids).
func BenchmarkRepeatFilter(b *testing.B) {
	n := Notice{Watcher: "agent:w:main", Target: SessionRef{AgentID: "main", Key: "agent:main:main"}, ChangesSince: 7,
		OpenedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b.Run("impl=stamps", func(b *testing.B) {
		kept := make([]*repeatFilter, 0, b.N)
		b.ReportAllocs()
		for range b.N {
			f := new(repeatFilter)
			f.accept(&n)
			kept = append(kept, f)
		}
		runtime.KeepAlive(kept)
	})
	b.Run("impl=ids", func(b *testing.B) {
		kept := make([]repeatOracle, 0, b.N)
		b.ReportAllocs()
		for range b.N {
			f := repeatOracle{}
			f.accept(&n)
			kept = append(kept, f)
		}
		runtime.KeepAlive(kept)
	})
}
