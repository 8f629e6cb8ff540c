package awareness

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// batchStore is a Store whose Append records batch sizes, can be held closed to force
// appends to queue up, and can fail batches that contain a poisoned op.
type batchStore struct {
	Store
	mu      sync.Mutex
	batches []int
	gate    chan struct{} // when non-nil, the first Append waits on it
	poison  string        // a batch containing this dedupe key fails as a whole
	seq     int64
}

func (b *batchStore) Append(ctx context.Context, ops []*AppendOp) error {
	b.mu.Lock()
	gate := b.gate
	b.gate = nil
	b.batches = append(b.batches, len(ops))
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	for _, op := range ops {
		if b.poison != "" && op.New.Event.DedupeKey == b.poison {
			return Errorf(EINVALID, "poisoned")
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, op := range ops {
		b.seq++
		op.Recorded, op.Version = true, b.seq
	}
	return nil
}

func newOp(dedupe string) *AppendOp {
	return &AppendOp{New: NewEvent{Event: Event{DedupeKey: dedupe}}, Now: time.Unix(1, 0)}
}

// TestGroupCommitBatchesConcurrentAppends: while one commit is in flight, the appends
// that arrive queue up and commit together in the next transaction, each acknowledged
// with its own result.
func TestGroupCommitBatchesConcurrentAppends(t *testing.T) {
	gate := make(chan struct{})
	st := &batchStore{gate: gate}
	c := newCommitter(st, MaxGroupCommit, nil)

	const n = 50
	ops := make([]*AppendOp, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(1)
	ops[0] = newOp("")
	go func() { defer wg.Done(); errs[0] = c.append(context.Background(), ops[0]) }()
	// Wait until the leader's commit is in flight, then queue the rest behind it.
	waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.batches) == 1 })
	for i := 1; i < n; i++ {
		ops[i] = newOp("")
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = c.append(context.Background(), ops[i]) }(i)
	}
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == n-1 })
	close(gate)
	wg.Wait()

	seen := map[int64]bool{}
	for i, op := range ops {
		if errs[i] != nil || !op.Recorded || seen[op.Version] {
			t.Fatalf("append %d: err %v recorded %v version %d (dup %v)", i, errs[i], op.Recorded, op.Version, seen[op.Version])
		}
		seen[op.Version] = true
	}
	if got, want := st.batches, []int{1, n - 1}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("batches = %v, want %v", got, want)
	}
	if c.busy || len(c.queue) != 0 {
		t.Fatalf("committer left busy=%v queue=%d", c.busy, len(c.queue))
	}
}

// TestGroupCommitBoundsBatchSize: no transaction carries more than the bound.
func TestGroupCommitBoundsBatchSize(t *testing.T) {
	gate := make(chan struct{})
	st := &batchStore{gate: gate}
	c := newCommitter(st, 8, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.append(context.Background(), newOp("")) }()
	waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.batches) == 1 })
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.append(context.Background(), newOp("")) }()
	}
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 30 })
	close(gate)
	wg.Wait()
	total := 0
	for _, b := range st.batches {
		if b > 8 {
			t.Fatalf("batch of %d exceeds the bound 8: %v", b, st.batches)
		}
		total += b
	}
	if total != 31 {
		t.Fatalf("committed %d appends, want 31 (%v)", total, st.batches)
	}
}

// TestGroupCommitIsolatesAFailingAppend: a shared transaction that fails because of
// one append is retried append by append, so only that append fails.
func TestGroupCommitIsolatesAFailingAppend(t *testing.T) {
	gate := make(chan struct{})
	st := &batchStore{gate: gate, poison: "bad"}
	c := newCommitter(st, MaxGroupCommit, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.append(context.Background(), newOp("")) }()
	waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.batches) == 1 })
	keys := []string{"a", "bad", "c", "d"}
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func(i int, k string) { defer wg.Done(); errs[i] = c.append(context.Background(), newOp(k)) }(i, k)
	}
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == len(keys) })
	close(gate)
	wg.Wait()
	for i, k := range keys {
		if (k == "bad") != (errs[i] != nil) {
			t.Errorf("append %q: err %v", k, errs[i])
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommitKeepsAUnitWhole: the ops of one call (a recordEvents batch) commit in
// one transaction, with other callers' appends or alone, never split across two; a
// shared transaction that fails because of one unit is retried unit by unit, so that
// unit fails as a whole and the others commit.
func TestGroupCommitKeepsAUnitWhole(t *testing.T) {
	gate := make(chan struct{})
	st := &batchStore{gate: gate, poison: "bad"}
	c := newCommitter(st, 8, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.append(context.Background(), newOp("")) }()
	waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.batches) == 1 })
	unit := func(n int, poison bool) []*AppendOp {
		ops := make([]*AppendOp, n)
		for i := range ops {
			ops[i] = newOp("")
		}
		if poison {
			ops[n-1] = newOp("bad")
		}
		return ops
	}
	// Queued in this order: 5 ops (a unit), 1, a poisoned unit of 3, 12 (over the
	// bound: alone), 2.
	units := [][]*AppendOp{unit(5, false), unit(1, false), unit(3, true), unit(12, false), unit(2, false)}
	errs := make([]error, len(units))
	for i, u := range units {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.append(context.Background(), u...) }()
		waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == i+1 })
	}
	close(gate)
	wg.Wait()
	for i, u := range units {
		poisoned := u[len(u)-1].New.Event.DedupeKey == "bad"
		if poisoned != (errs[i] != nil) {
			t.Errorf("unit %d: err %v", i, errs[i])
		}
		for _, op := range u {
			if op.Recorded == poisoned {
				t.Errorf("unit %d: an op recorded=%v, want %v for the whole unit", i, op.Recorded, !poisoned)
			}
		}
	}
	// 1 (the leader); 5+1 (the unit of 3 would pass 8); the poisoned 3 with nothing
	// after it that fits; 12 alone (over the bound, never split); 2.
	st.mu.Lock()
	defer st.mu.Unlock()
	if want := []int{1, 6, 3, 12, 2}; !slices.Equal(st.batches, want) {
		t.Errorf("transactions of %v ops, want %v", st.batches, want)
	}
}

// TestGroupCommitRetriesUnitsWhole: a shared transaction failed by one unit is retried
// unit by unit, never op by op.
func TestGroupCommitRetriesUnitsWhole(t *testing.T) {
	gate := make(chan struct{})
	st := &batchStore{gate: gate, poison: "bad"}
	c := newCommitter(st, MaxGroupCommit, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.append(context.Background(), newOp("")) }()
	waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return len(st.batches) == 1 })
	good, bad := []*AppendOp{newOp(""), newOp("")}, []*AppendOp{newOp(""), newOp("bad"), newOp("")}
	var errGood, errBad error
	wg.Add(2)
	go func() { defer wg.Done(); errGood = c.append(context.Background(), good...) }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 1 })
	go func() { defer wg.Done(); errBad = c.append(context.Background(), bad...) }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 2 })
	close(gate)
	wg.Wait()
	if errGood != nil || errBad == nil {
		t.Fatalf("good unit: %v, poisoned unit: %v", errGood, errBad)
	}
	for _, op := range bad {
		if op.Recorded {
			t.Error("an op of the failed unit is recorded")
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if want := []int{1, 5, 2, 3}; !slices.Equal(st.batches, want) {
		t.Errorf("transactions of %v ops, want %v (shared, then each unit on its own)", st.batches, want)
	}
}
