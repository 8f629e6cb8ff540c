package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awareness/awareness/bench/internal/loadkeys"
)

// recorder holds the arrival time of each expected frame: per target set, per round
// (broadcast) or per subscriber (own target). Each slot is written by one reader.
type recorder struct {
	sets map[byte][][]atomic.Int64 // set → round → subscriber → unix nanos
	// counts per set and round, to know when a round is complete.
	counts        map[byte][]atomic.Int64
	dupes         atomic.Int64
	mismatch, bad atomic.Int64
	unexpected    atomic.Int64
	endedMu       sync.Mutex
	endedN        int
	endedFirst    string
}

func newRecorder(c config) *recorder {
	rc := &recorder{sets: map[byte][][]atomic.Int64{}, counts: map[byte][]atomic.Int64{}}
	mk := func(set byte, rounds, n int) {
		rc.sets[set] = make([][]atomic.Int64, rounds)
		for i := range rounds {
			rc.sets[set][i] = make([]atomic.Int64, n)
		}
		rc.counts[set] = make([]atomic.Int64, rounds)
	}
	mk('c', c.roundsSmall, c.small)
	mk('b', c.roundsBig, c.subs)
	mk('a', 1, c.subs)
	mk('u', 1, c.subs)
	return rc
}

func (rc *recorder) frame(idx int, target string, at int64) {
	set, i, ok := loadkeys.ParseTarget(target)
	rounds, known := rc.sets[set]
	if !ok || !known {
		rc.unexpected.Add(1)
		return
	}
	round := i
	if set == 'a' || set == 'u' {
		round = 0
		if i != idx {
			rc.mismatch.Add(1)
			return
		}
	}
	if round >= len(rounds) || idx >= len(rounds[round]) {
		rc.unexpected.Add(1)
		return
	}
	if !rounds[round][idx].CompareAndSwap(0, at) {
		rc.dupes.Add(1)
		return
	}
	rc.counts[set][round].Add(1)
}

func (rc *recorder) ended(idx int, err error) {
	rc.endedMu.Lock()
	defer rc.endedMu.Unlock()
	if rc.endedN == 0 {
		rc.endedFirst = fmt.Sprintf("client %d: %v", idx, err)
	}
	rc.endedN++
}

// waitFor waits until want frames of set/round arrived, or the wait passed.
func (rc *recorder) waitFor(ctx context.Context, set byte, round int, want int64, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for rc.counts[set][round].Load() < want && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
}
