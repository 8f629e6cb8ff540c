// The signal log's cases: round trips, dense sequences, dedupe, pruning and its
// watermarks, the sessions list, identity, batches, reads and a closed store.

package storetest

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

func testEventRoundTrip(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	occurred := t0.Add(-90 * time.Minute).Add(987 * time.Nanosecond)
	in := awareness.RecordInput{
		SessionKey: targetKey, Kind: awareness.RunFailed, ActorType: awareness.ActorAgent,
		ActorID: ptr(childKey), Summary: ptr("child run timed out after 10m"), OccurredAt: &occurred,
		RunID: ptr("run-42"), Outcome: ptr(awareness.OutcomeTimeout), Channel: ptr("cli"), Turns: ptr(3),
		DedupeKey: ptr("dd-1"),
	}
	now := t0.Add(17 * time.Nanosecond).In(time.FixedZone("X", 3600))
	op := f.append1(now, in)
	want := awareness.Event{
		Session: r, Sequence: 1, Kind: awareness.RunFailed, ActorType: awareness.ActorAgent, ActorID: childKey,
		Summary: "child run timed out after 10m", OccurredAt: occurred, RunID: "run-42",
		Payload:   awareness.Payload{Outcome: awareness.OutcomeTimeout, Channel: "cli", Turns: 3},
		DedupeKey: "dd-1", RecordedAt: now,
	}
	if diff := cmp.Diff(want, op.Event); diff != "" {
		t.Errorf("Append event mismatch (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, 10)
	if diff := cmp.Diff([]awareness.Event{want}, ch.Events); diff != "" {
		t.Errorf("ReadChanges events mismatch (-want +got):\n%s", diff)
	}
	if got := ch.Events[0].RecordedAt.UnixNano(); got != now.UnixNano() {
		t.Errorf("RecordedAt nanos: got %d, want %d", got, now.UnixNano())
	}
	if got := ch.Events[0].OccurredAt.UnixNano(); got != occurred.UnixNano() {
		t.Errorf("OccurredAt nanos: got %d, want %d", got, occurred.UnixNano())
	}
	if !ch.Head.UpdatedAt.Equal(now) {
		t.Errorf("Head.UpdatedAt: got %v, want %v", ch.Head.UpdatedAt, now)
	}
	// A payload-less event stores no payload.
	op2 := f.append1(now, system(targetKey, awareness.Compacted))
	if !op2.Event.Payload.IsZero() {
		t.Errorf("payload: got %+v, want zero", op2.Event.Payload)
	}
	// A page reads each row on its own: the empty optional columns of the second event
	// neither keep the first's values nor leak into the third's.
	in.DedupeKey = ptr("dd-2")
	op3 := f.append1(now, in)
	page := f.read(r, 0, 10)
	if diff := cmp.Diff([]awareness.Event{op.Event, op2.Event, op3.Event}, page.Events); diff != "" {
		t.Errorf("ReadChanges page mismatch (-want +got):\n%s", diff)
	}
	if page.Events[1].ActorID != "" || page.Events[1].RunID != "" || page.Events[1].DedupeKey != "" {
		t.Errorf("payload-less event read back with optional fields: %+v", page.Events[1])
	}
}

func testDenseSequences(t *testing.T, f *fixture) {
	a, b := ref(t, parentKey), ref(t, childKey)
	now := t0
	var gotA, gotB []int64
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		gotA = append(gotA, f.append1(now, human(parentKey)).Version)
		if i%2 == 0 {
			gotB = append(gotB, f.append1(now, system(childKey, awareness.RunCompleted)).Version)
		}
	}
	if diff := cmp.Diff(seqRange(1, 5), gotA); diff != "" {
		t.Errorf("versions of A (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seqRange(1, 3), gotB); diff != "" {
		t.Errorf("versions of B (-want +got):\n%s", diff)
	}

	tests := []struct {
		name      string
		ref       awareness.SessionRef
		after     int64
		limit     int
		wantSeqs  []int64
		wantMore  bool
		wantVer   int64
		wantFirst int64
	}{
		{"all", a, 0, 100, seqRange(1, 5), false, 5, 1},
		{"page", a, 2, 2, []int64{3, 4}, true, 5, 1},
		{"last page exact", a, 3, 2, []int64{4, 5}, false, 5, 1},
		{"at head", a, 5, 10, nil, false, 5, 1},
		{"other session", b, 1, 10, []int64{2, 3}, false, 3, 1},
		{"zero limit", a, 0, 0, nil, true, 5, 1},
		{"no head", ref(t, "agent:main:nobody"), 0, 10, nil, false, 0, 1},
	}
	for _, tt := range tests {
		ch := f.read(tt.ref, tt.after, tt.limit)
		if diff := cmp.Diff(tt.wantSeqs, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("%s: sequences (-want +got):\n%s", tt.name, diff)
		}
		if ch.More != tt.wantMore || ch.Head.Version != tt.wantVer || ch.Earliest != tt.wantFirst {
			t.Errorf("%s: got More=%v Version=%d Earliest=%d, want %v %d %d",
				tt.name, ch.More, ch.Head.Version, ch.Earliest, tt.wantMore, tt.wantVer, tt.wantFirst)
		}
		if ch.Head.Session != tt.ref {
			t.Errorf("%s: Head.Session: got %v, want %v", tt.name, ch.Head.Session, tt.ref)
		}
	}
}

func testConcurrentAppendsDense(t *testing.T, f *fixture) {
	const workers, each = 8, 100
	r := ref(t, targetKey)
	var (
		mu       sync.Mutex
		versions []int64
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				now := t0.Add(time.Duration(w*each+i) * time.Millisecond)
				ne, err := awareness.ValidateRecord(human(targetKey), now)
				if err != nil {
					errs <- err
					return
				}
				op := awareness.NewAppendOp(ne, now)
				if err := f.s.Append(f.ctx, []*awareness.AppendOp{op}); err != nil {
					errs <- fmt.Errorf("worker %d append %d: %w", w, i, err)
					return
				}
				mu.Lock()
				versions = append(versions, op.Version)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(versions)
	if diff := cmp.Diff(seqRange(1, workers*each), versions); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, workers*each+1)
	if diff := cmp.Diff(seqRange(1, workers*each), seqs(ch.Events)); diff != "" {
		t.Errorf("logged sequences (-want +got):\n%s", diff)
	}
	if got, want := ch.Head.Version, int64(workers*each); got != want {
		t.Errorf("head: got %d, want %d", got, want)
	}
}

func testDedupe(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.watch(parentKey, r, t0)
	in := human(targetKey)
	in.DedupeKey = ptr("msg-1")
	first := f.append1(t0.Add(time.Second), in)
	if !first.Recorded || first.Version != 1 || len(first.Opened) != 1 {
		t.Fatalf("first append: got Recorded=%v Version=%d Opened=%d, want true 1 1", first.Recorded, first.Version, len(first.Opened))
	}
	f.append1(t0.Add(2*time.Second), system(targetKey, awareness.RunCompleted))
	before := f.mustCursor(parentKey, r)

	again := in
	again.Summary = ptr("a different summary")
	second := f.append1(t0.Add(3*time.Second), again)
	if second.Recorded {
		t.Errorf("second append: Recorded = true, want false")
	}
	if second.Version != 2 {
		t.Errorf("second append: Version = %d, want the current head 2", second.Version)
	}
	if diff := cmp.Diff(first.Event, second.Event); diff != "" {
		t.Errorf("deduplicated event is not the first one (-want +got):\n%s", diff)
	}
	if len(second.Opened) != 0 {
		t.Errorf("deduplicated append opened %d notices, want 0", len(second.Opened))
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, r)); diff != "" {
		t.Errorf("deduplicated append moved a cursor (-want +got):\n%s", diff)
	}
	if got := f.read(r, 0, 10).Head.Version; got != 2 {
		t.Errorf("head after dedupe: got %d, want 2", got)
	}
	// The key is per session.
	other := human(childKey)
	other.DedupeKey = ptr("msg-1")
	if op := f.append1(t0.Add(4*time.Second), other); !op.Recorded || op.Version != 1 {
		t.Errorf("same key on another session: got Recorded=%v Version=%d, want true 1", op.Recorded, op.Version)
	}
}

func testHeadsSurvivePruning(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour))
	if diff := cmp.Diff(awareness.PruneResult{EventsDeleted: 3, SessionsStamped: 1}, res); diff != "" {
		t.Errorf("prune result (-want +got):\n%s", diff)
	}
	ch := f.read(r, 0, 10)
	if ch.Head.Version != 3 || ch.Head.PrunedThrough != 3 || ch.Earliest != 4 || len(ch.Events) != 0 {
		t.Errorf("after prune: got Version=%d PrunedThrough=%d Earliest=%d events=%v, want 3 3 4 none",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, seqs(ch.Events))
	}
	s, ok, err := f.s.Session(f.ctx, r)
	if err != nil || !ok || s.StateVersion != 3 {
		t.Errorf("Session after prune: got %+v, %v, %v, want StateVersion 3", s, ok, err)
	}
	if op := f.append1(t0.Add(3*time.Hour), human(targetKey)); op.Version != 4 {
		t.Errorf("append after prune: got version %d, want 4", op.Version)
	}
	// Pruning again with nothing old changes nothing.
	if res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(3*time.Hour)); !cmp.Equal(res, awareness.PruneResult{}, emptyOK) {
		t.Errorf("second prune: got %+v, want nothing", res)
	}
	if ch := f.read(r, 0, 10); ch.Head.Version != 4 || ch.Head.PrunedThrough != 3 || ch.Earliest != 4 {
		t.Errorf("head after second prune: got Version=%d PrunedThrough=%d Earliest=%d, want 4 3 4",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest)
	}
}

func testWatermarkStamping(t *testing.T, f *fixture) {
	a, b := ref(t, targetKey), ref(t, childKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey), human(childKey))
	f.append(t0.Add(2*time.Hour), human(targetKey), human(targetKey), human(childKey))
	res := f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour+30*time.Minute))
	if diff := cmp.Diff(awareness.PruneResult{EventsDeleted: 4, SessionsStamped: 2}, res); diff != "" {
		t.Errorf("prune result (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		ref                   awareness.SessionRef
		version, pruned, from int64
		retained              []int64
	}{
		{a, 5, 3, 4, []int64{4, 5}},
		{b, 2, 1, 2, []int64{2}},
	} {
		ch := f.read(tt.ref, 0, 10)
		if ch.Head.Version != tt.version || ch.Head.PrunedThrough != tt.pruned || ch.Earliest != tt.from {
			t.Errorf("%v: got Version=%d PrunedThrough=%d Earliest=%d, want %d %d %d", tt.ref.Key,
				ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, tt.version, tt.pruned, tt.from)
		}
		if diff := cmp.Diff(tt.retained, seqs(ch.Events)); diff != "" {
			t.Errorf("%v: retained (-want +got):\n%s", tt.ref.Key, diff)
		}
	}
}

func testRowCap(t *testing.T, f *fixture) {
	keys := []string{parentKey, childKey, targetKey}
	type rec struct {
		key string
		seq int64
	}
	var order []rec // recorded order
	now := t0
	for i := 0; i < 10; i++ {
		for _, k := range keys {
			now = now.Add(time.Second)
			op := f.append1(now, human(k))
			order = append(order, rec{k, op.Version})
		}
	}
	// Five events in one batch share one recorded time.
	now = now.Add(time.Second)
	for _, op := range f.append(now, human(targetKey), human(parentKey), human(targetKey), human(childKey), human(targetKey)) {
		order = append(order, rec{op.Event.Session.Key, op.Version})
	}
	const limit = 7
	res := f.prune(awareness.RetentionPolicy{MaxRows: limit}, now)
	if got, want := res.EventsDeleted, int64(len(order)-limit); got != want {
		t.Errorf("EventsDeleted: got %d, want %d", got, want)
	}
	if got := f.stats().Events; got != limit {
		t.Errorf("events left: got %d, want exactly %d", got, limit)
	}
	// Whatever is kept is a suffix of each session's log, and the watermark is exact.
	kept := 0
	for _, k := range keys {
		ch := f.read(ref(t, k), 0, 100)
		kept += len(ch.Events)
		want := seqRange(ch.Head.PrunedThrough+1, ch.Head.Version)
		if diff := cmp.Diff(want, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("%s: retained events are not (PrunedThrough, Version] (-want +got):\n%s", k, diff)
		}
	}
	if kept != limit {
		t.Errorf("retained across sessions: got %d, want %d", kept, limit)
	}
	// Only sessions with events among the newest `limit` keep rows, and the newest
	// record of every session is kept.
	newest := map[string]bool{}
	for _, r := range order[len(order)-limit:] {
		newest[r.key] = true
	}
	for _, k := range keys {
		ch := f.read(ref(t, k), 0, 100)
		if got := len(ch.Events) > 0; got != newest[k] {
			t.Errorf("%s retains events: got %v, want %v", k, got, newest[k])
		}
	}
	if res := f.prune(awareness.RetentionPolicy{MaxRows: limit}, now); res.EventsDeleted != 0 {
		t.Errorf("second prune deleted %d, want 0", res.EventsDeleted)
	}
	if res := f.prune(awareness.RetentionPolicy{MaxRows: 1000}, now); res.EventsDeleted != 0 {
		t.Errorf("prune under the cap deleted %d, want 0", res.EventsDeleted)
	}
}

func testTimePruning(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	day := 24 * time.Hour
	for i := 0; i < 3; i++ {
		f.append1(t0.Add(time.Duration(i)*day), human(targetKey)) // occurredAt defaults to now
	}
	// An event that occurred an hour before it was recorded (SIG-5).
	past := t0.Add(3*day - time.Hour)
	in := human(targetKey)
	in.OccurredAt = &past
	f.append1(t0.Add(3*day), in)

	pol := awareness.RetentionPolicy{MaxAge: 36 * time.Hour}
	// now−36h = t0+1d+13h: only the event of t0 is old.
	now := t0.Add(2*day + time.Hour)
	if res := f.prune(pol, now); res.EventsDeleted != 1 {
		t.Errorf("first prune deleted %d, want 1", res.EventsDeleted)
	}
	st := f.stats()
	if st.LastPruneAt == nil || !st.LastPruneAt.Equal(now) {
		t.Errorf("LastPruneAt: got %v, want %v", st.LastPruneAt, now)
	}
	if st.OldestEvent == nil || !st.OldestEvent.Equal(t0.Add(day)) {
		t.Errorf("OldestEvent: got %v, want %v", st.OldestEvent, t0.Add(day))
	}
	// Age uses occurredAt: at exactly 36h after `past`, the backdated event is not yet
	// older than the limit; one nanosecond later it is.
	now = past.Add(36 * time.Hour)
	f.prune(pol, now)
	if got := seqs(f.read(r, 0, 10).Events); !slices.Equal(got, []int64{4}) {
		t.Errorf("retained at the boundary: got %v, want [4]", got)
	}
	f.prune(pol, now.Add(time.Nanosecond))
	ch := f.read(r, 0, 10)
	if len(ch.Events) != 0 || ch.Head.Version != 4 || ch.Head.PrunedThrough != 4 {
		t.Errorf("after pruning all: got events %v Version=%d PrunedThrough=%d, want none 4 4",
			seqs(ch.Events), ch.Head.Version, ch.Head.PrunedThrough)
	}
	if st := f.stats(); st.OldestEvent != nil {
		t.Errorf("OldestEvent with an empty log: got %v, want nil", st.OldestEvent)
	}
	// A zero policy prunes nothing but still records the run.
	if res := f.prune(awareness.RetentionPolicy{}, now.Add(day)); !cmp.Equal(res, awareness.PruneResult{}, emptyOK) {
		t.Errorf("zero policy: got %+v", res)
	}
}

func testHistoryGapBoundaries(t *testing.T, f *fixture) {
	r := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	f.append(t0.Add(2*time.Hour), human(targetKey), human(targetKey), human(targetKey))
	f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(2*time.Hour))
	const w = 3 // pruned watermark
	tests := []struct {
		after   int64
		gap     bool
		want    []int64
		wantErl int64
	}{
		{0, true, []int64{4, 5, 6}, 4},
		{w - 1, true, []int64{4, 5, 6}, 4},
		{w, false, []int64{4, 5, 6}, 4},
		{w + 1, false, []int64{5, 6}, 4},
		{6, false, nil, 4},
	}
	for _, tt := range tests {
		ch := f.read(r, tt.after, 200)
		if ch.Head.PrunedThrough != w {
			t.Fatalf("PrunedThrough: got %d, want %d", ch.Head.PrunedThrough, w)
		}
		if gap := tt.after < ch.Head.PrunedThrough; gap != tt.gap {
			t.Errorf("after %d: gap %v, want %v", tt.after, gap, tt.gap)
		}
		if diff := cmp.Diff(tt.want, seqs(ch.Events), emptyOK); diff != "" {
			t.Errorf("after %d: events (-want +got):\n%s", tt.after, diff)
		}
		if ch.Earliest != tt.wantErl {
			t.Errorf("after %d: Earliest %d, want %d", tt.after, ch.Earliest, tt.wantErl)
		}
	}
}

func testSessionsList(t *testing.T, f *fixture) {
	keys := []string{parentKey, childKey, targetKey, "cron:nightly", "cron:a_b", "cron:axb", "cron:a%b", "global"}
	for i, k := range keys {
		f.append1(t0.Add(time.Duration(i)*time.Minute), system(k, awareness.Compacted))
	}
	f.append1(t0.Add(time.Hour), system(parentKey, awareness.Compacted))
	f.append1(t0.Add(time.Hour), system(parentKey, awareness.RunCompleted))
	f.append1(t0, system(opsKey, awareness.RunCompleted))

	s, ok, err := f.s.Session(f.ctx, ref(t, parentKey))
	if err != nil || !ok {
		t.Fatalf("Session: %v %v", ok, err)
	}
	want := awareness.Session{
		Ref: ref(t, parentKey), Kind: awareness.KindMain, StateVersion: 3, CompactionCount: 2,
		CreatedAt: t0, UpdatedAt: t0.Add(time.Hour),
	}
	if diff := cmp.Diff(want, s, emptyOK); diff != "" {
		t.Errorf("Session (-want +got):\n%s", diff)
	}
	if _, ok, err := f.s.Session(f.ctx, ref(t, "agent:main:never")); ok || err != nil {
		t.Errorf("Session of unknown: got ok=%v err=%v, want false nil", ok, err)
	}

	list := func(q awareness.SessionQuery) []string {
		t.Helper()
		ss, err := f.s.ListSessions(f.ctx, q)
		if err != nil {
			t.Fatalf("ListSessions(%+v): %v", q, err)
		}
		var out []string
		for _, s := range ss {
			out = append(out, s.Ref.AgentID+"/"+s.Ref.Key)
		}
		return out
	}
	all := []string{"main/agent:main:direct:alice", "main/agent:main:main", "main/agent:main:subagent:c1",
		"main/cron:a%b", "main/cron:a_b", "main/cron:axb", "main/cron:nightly", "main/global", "ops/agent:ops:main"}
	sort.Strings(all)
	if diff := cmp.Diff(all, list(awareness.SessionQuery{})); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
	// Keyset pages of 2 walk the whole list exactly once.
	var paged []string
	q := awareness.SessionQuery{Limit: 2}
	for i := 0; i < 10; i++ {
		ss, err := f.s.ListSessions(f.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			paged = append(paged, s.Ref.AgentID+"/"+s.Ref.Key)
		}
		if len(ss) < 2 {
			break
		}
		last := ss[len(ss)-1].Ref
		q.After = &last
	}
	if diff := cmp.Diff(all, paged); diff != "" {
		t.Errorf("paged (-want +got):\n%s", diff)
	}
	tests := []struct {
		name string
		q    awareness.SessionQuery
		want []string
	}{
		{"agent", awareness.SessionQuery{AgentID: "ops"}, []string{"ops/agent:ops:main"}},
		{"kinds", awareness.SessionQuery{Kinds: []awareness.SessionKind{awareness.KindMain, awareness.KindGlobal}},
			[]string{"main/agent:main:main", "main/global", "ops/agent:ops:main"}},
		{"prefix is literal", awareness.SessionQuery{KeyPrefix: "cron:a_"}, []string{"main/cron:a_b"}},
		{"prefix percent", awareness.SessionQuery{KeyPrefix: "cron:a%"}, []string{"main/cron:a%b"}},
		{"prefix", awareness.SessionQuery{AgentID: "main", KeyPrefix: "cron:"},
			[]string{"main/cron:a%b", "main/cron:a_b", "main/cron:axb", "main/cron:nightly"}},
		{"updated since inclusive", awareness.SessionQuery{UpdatedSince: t0.Add(7 * time.Minute)},
			[]string{"main/agent:main:main", "main/global"}},
		{"after", awareness.SessionQuery{After: &awareness.SessionRef{AgentID: "main", Key: "global"}},
			[]string{"ops/agent:ops:main"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, list(tt.q), emptyOK); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func testCompositeIdentity(t *testing.T, f *fixture) {
	mainGlobal, opsGlobal := ref(t, "global"), ref(t, "global", "ops")
	if mainGlobal == opsGlobal {
		t.Fatalf("refs are equal: %v", mainGlobal)
	}
	f.watch(parentKey, opsGlobal, t0)
	inMain := awareness.RecordInput{SessionKey: "global", Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}
	inOps := inMain
	inOps.AgentID = ptr("ops")
	a := f.append(t0, inMain, inMain)
	if a[1].Version != 2 || len(a[0].Opened)+len(a[1].Opened) != 0 {
		t.Errorf("main/global: got version %d, opened %d, want 2 and none", a[1].Version, len(a[0].Opened)+len(a[1].Opened))
	}
	b := f.append1(t0.Add(time.Second), inOps)
	if b.Version != 1 {
		t.Errorf("ops/global: got version %d, want 1", b.Version)
	}
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, opsGlobal, 0, 1, 1, t0.Add(time.Second))}, b.Opened); diff != "" {
		t.Errorf("ops/global notices (-want +got):\n%s", diff)
	}
	if got := f.read(mainGlobal, 0, 10); got.Head.Version != 2 || len(got.Events) != 2 {
		t.Errorf("main/global: got version %d with %d events", got.Head.Version, len(got.Events))
	}
	// Targets are agent-qualified: acking main's global leaves ops's global alone.
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{mainGlobal}}, t0.Add(time.Minute)); len(res.Closed) != 0 {
		t.Errorf("ack of main/global closed %v", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 1 {
		t.Errorf("pending after acking another agent's global: %v, want ops/global's notice", got)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{opsGlobal}}, t0.Add(time.Minute)); len(res.Closed) != 1 {
		t.Errorf("ack of ops/global closed %v, want its notice", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 0 {
		t.Errorf("pending after ack: %v", got)
	}
	ok, _, err := deleteSession(f.ctx, f.s, mainGlobal, t0.Add(time.Hour))
	if err != nil || !ok {
		t.Fatalf("DeleteSession: %v %v", ok, err)
	}
	if _, ok, _ := f.s.Session(f.ctx, opsGlobal); !ok {
		t.Errorf("deleting main/global deleted ops/global")
	}
	if _, ok := f.cursor(parentKey, opsGlobal); !ok {
		t.Errorf("deleting main/global deleted the cursor on ops/global")
	}
}

func testBatchAtomic(t *testing.T, f *fixture) {
	a := ref(t, targetKey)
	f.watch(parentKey, a, t0)
	now := t0.Add(time.Second)
	dup := human(targetKey)
	dup.DedupeKey = ptr("x")
	dup2 := dup
	dup2.Summary = ptr("same dedupe key, other summary")
	ops := f.append(now, dup, system(childKey, awareness.GoalChanged), dup2, human(targetKey))

	type res struct {
		Key      string
		Version  int64
		Recorded bool
		Opened   int
	}
	var got []res
	for _, op := range ops {
		got = append(got, res{op.Event.Session.Key, op.Version, op.Recorded, len(op.Opened)})
	}
	want := []res{{targetKey, 1, true, 1}, {childKey, 1, true, 0}, {targetKey, 1, false, 0}, {targetKey, 2, true, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batch results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ops[0].Event, ops[2].Event); diff != "" {
		t.Errorf("in-batch dedupe did not return the first event (-want +got):\n%s", diff)
	}
	cur := f.mustCursor(parentKey, a)
	if cur.L != 0 || cur.N != 1 || cur.M != 2 {
		t.Errorf("cursor after batch: got L=%d N=%d M=%d, want 0 1 2", cur.L, cur.N, cur.M)
	}

	// A batch with a malformed op commits nothing and reports no results.
	fresh := "agent:main:subagent:fresh"
	bad := &awareness.AppendOp{Now: now, New: awareness.NewEvent{Event: awareness.Event{
		Session: a, Kind: "bogus", ActorType: awareness.ActorHuman, Summary: "x", OccurredAt: now, RecordedAt: now}}}
	batch := []*awareness.AppendOp{f.op(human(targetKey), now), f.op(human(fresh, parentKey), now), bad}
	err := f.s.Append(f.ctx, batch)
	if code := awareness.ErrorCode(err); code != awareness.EINVALID {
		t.Fatalf("bad batch: got code %q (%v), want %s", code, err, awareness.EINVALID)
	}
	for i, op := range batch[:2] {
		if op.Version != 0 || op.Recorded || len(op.Opened) != 0 || op.Event.Sequence != 0 {
			t.Errorf("op %d of a failed batch kept results: %+v", i, op)
		}
	}
	if v := f.read(a, 0, 10).Head.Version; v != 2 {
		t.Errorf("head after failed batch: got %d, want 2", v)
	}
	if _, ok, _ := f.s.Session(f.ctx, ref(t, fresh)); ok {
		t.Errorf("failed batch created a session")
	}
	if diff := cmp.Diff(cur, f.mustCursor(parentKey, a)); diff != "" {
		t.Errorf("failed batch moved a cursor (-want +got):\n%s", diff)
	}
	if _, ok := f.cursor(parentKey, ref(t, fresh)); ok {
		t.Errorf("failed batch created a cursor")
	}
	if err := f.s.Append(f.ctx, nil); err != nil {
		t.Errorf("empty Append: %v", err)
	}
}

func testStatsAndPing(t *testing.T, f *fixture) {
	if err := f.s.Ping(f.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if diff := cmp.Diff(awareness.Stats{}, f.stats()); diff != "" {
		t.Errorf("empty stats (-want +got):\n%s", diff)
	}
	f.watch(parentKey, ref(t, targetKey), t0)
	f.watch(opsKey, ref(t, childKey), t0)
	f.append(t0.Add(time.Second), human(targetKey), human(targetKey), system(childKey, awareness.RunCompleted))
	f.append1(t0.Add(time.Second), system(opsKey, awareness.Compacted))
	if _, _, err := deleteSession(f.ctx, f.s, ref(t, opsKey), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	oldest := t0.Add(time.Second)
	// Deleting ops also deleted the cursor it held; its deleted event stays (LIF-1).
	want := awareness.Stats{Sessions: 2, Events: 4, Cursors: 1, PendingNotices: 1, OldestEvent: &oldest}
	if diff := cmp.Diff(want, f.stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// testReadStatus: ReadStatus is ReadChanges and Session in one read (REC-1), for a
// session that does not exist, one with a log and no entry, a page of it, and a
// deleted one (its head stays, Session says not found).
func testReadStatus(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	if ch, sess := f.status(target, 0, 10); ch.Head.Version != 0 || sess != nil {
		t.Errorf("unknown session: head %+v, session %+v", ch.Head, sess)
	}
	f.append(t0, human(targetKey), human(targetKey), system(targetKey, awareness.Compacted))
	ch, sess := f.status(target, 1, 1)
	if ch.Head.Version != 3 || seqs(ch.Events)[0] != 2 || !ch.More || sess == nil || sess.StateVersion != 3 || sess.CompactionCount != 1 {
		t.Errorf("session with a log: changes %+v, session %+v", ch, sess)
	}
	f.status(target, 3, 0)
	if _, _, err := deleteSession(f.ctx, f.s, target, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The deleted event is the one the log keeps (LIF-1).
	if ch, sess := f.status(target, 0, 10); ch.Head.Version != 4 || ch.Head.PrunedThrough != 3 || sess != nil ||
		len(ch.Events) != 1 || ch.Events[0].Kind != awareness.Deleted {
		t.Errorf("deleted session: head %+v, session %+v", ch.Head, sess)
	}
}

// testReadStatusSnapshot: the head, the page and the session row of a ReadStatus come
// from one snapshot, whatever commits meanwhile: the row's version is the head's, and
// the page holds every event up to it.
func testReadStatusSnapshot(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	const appends = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range appends {
			if err := f.s.Append(f.ctx, []*awareness.AppendOp{f.op(human(targetKey), t0.Add(time.Duration(i)*time.Millisecond))}); err != nil {
				t.Errorf("Append: %v", err)
				return
			}
		}
	}()
	// check returns what is wrong with one ReadStatus, "" when nothing is.
	check := func() string {
		ch, sess, err := f.s.ReadStatus(f.ctx, target, 0, appends)
		switch {
		case err != nil:
			return fmt.Sprintf("ReadStatus: %v", err)
		case ch.Head.Version == 0 && (sess != nil || len(ch.Events) != 0):
			return fmt.Sprintf("no head, but session %+v and %d events", sess, len(ch.Events))
		case ch.Head.Version == 0:
			return ""
		case sess == nil || sess.StateVersion != ch.Head.Version || !sess.UpdatedAt.Equal(ch.Head.UpdatedAt):
			return fmt.Sprintf("head %+v, session %+v: not one snapshot", ch.Head, sess)
		case int64(len(ch.Events)) != ch.Head.Version || ch.More:
			return fmt.Sprintf("head %d with %d events (more %v): not one snapshot", ch.Head.Version, len(ch.Events), ch.More)
		}
		return ""
	}
	var bad string
	for running := true; running && bad == ""; {
		select {
		case <-done:
			running = false
		default:
		}
		bad = check()
	}
	<-done // the writer ends before the test does
	if bad == "" {
		bad = check()
	}
	if bad != "" {
		t.Error(bad)
	}
}

func testClosed(t *testing.T, f *fixture) {
	if err := f.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := f.s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if code := awareness.ErrorCode(err); code != awareness.EUNAVAILABLE {
			t.Errorf("%s after Close: got code %q (%v), want %s", what, code, err, awareness.EUNAVAILABLE)
		}
	}
	check("Ping", f.s.Ping(f.ctx))
	check("Append", f.s.Append(f.ctx, []*awareness.AppendOp{f.op(human(targetKey), t0)}))
	_, err := f.s.ReadChanges(f.ctx, ref(t, targetKey), 0, 10)
	check("ReadChanges", err)
	_, _, err = f.s.ReadStatus(f.ctx, ref(t, targetKey), 0, 10)
	check("ReadStatus", err)
	_, err = f.s.Pending(f.ctx, "")
	check("Pending", err)
}
