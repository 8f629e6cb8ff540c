package models

import (
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

func TestSQLiteDerivedMaterialMigratesDown(t *testing.T) {
	testDerivedMaterialMigratesDown(t, MustOpenSQLite(t))
}

func TestPostgresDerivedMaterialMigratesDown(t *testing.T) {
	testDerivedMaterialMigratesDown(t, MustOpenPostgres(t))
}

// testDerivedMaterialMigratesDown checks migration 00004 (M derived from the head):
// its Down writes the derived M and updated_at of a pending cursor into the row, and
// after Up again every read gives the cursor it gave before (NTC-2).
func testDerivedMaterialMigratesDown(t *testing.T, s *Store) {
	ctx := t.Context()
	target := awareness.SessionRef{AgentID: "t", Key: "agent:t:main"}
	t0 := time.Unix(1_700_000_000, 0).UTC()
	if _, _, err := s.Watch(ctx, "agent:w:main", target, "", t0); err != nil {
		t.Fatal(err)
	}
	appendAt := func(at time.Time) {
		t.Helper()
		ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: target.Key,
			Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, []*awareness.AppendOp{{New: ne, Now: at}}); err != nil {
			t.Fatal(err)
		}
	}
	appendAt(t0.Add(time.Second))     // opens the notice: N = M = 1
	appendAt(t0.Add(2 * time.Second)) // moves M to 2, written to the head only
	before, err := s.Cursors(ctx, awareness.CursorQuery{Watcher: "agent:w:main"})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || before[0].M != 2 || !before[0].UpdatedAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("cursor before the migration: got %+v, want M = 2 updated at t0+2s", before)
	}

	withWritePool(t, s, func(db *sql.DB) {
		p, err := newMigrator(s.d, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, 3); err != nil {
			t.Fatal(err)
		}
		var l, n, m, updated int64
		if err := db.QueryRowContext(ctx,
			"SELECT l, n, m, updated_at FROM cursors WHERE watcher_key = 'agent:w:main'").Scan(&l, &n, &m, &updated); err != nil {
			t.Fatal(err)
		}
		if got, want := []int64{l, n, m, updated}, []int64{0, 1, 2, nanos(t0.Add(2 * time.Second))}; !cmp.Equal(got, want) {
			t.Errorf("row after Down: got l, n, m, updated_at %v, want %v", got, want)
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
	})
	after, err := s.Cursors(ctx, awareness.CursorQuery{Watcher: "agent:w:main"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("cursor after Down and Up (-before +after):\n%s", diff)
	}
	appendAt(t0.Add(3 * time.Second))
	after, err = s.Cursors(ctx, awareness.CursorQuery{Watcher: "agent:w:main"})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 1 || after[0].M != 3 || after[0].N != 1 {
		t.Errorf("cursor after the next append: got %+v, want N = 1, M = 3", after)
	}
}

func TestEachOpened(t *testing.T) {
	type item struct {
		Watcher       string
		L, TGen, WGen int64
	}
	tests := []struct {
		list string
		want []item
		ok   bool
	}{
		{"", nil, true},
		{"0 1 1 12 agent:a:main", []item{{"agent:a:main", 0, 1, 1}}, true},
		{"7 2 1 13 agent:a:x y z3 1 4 12 agent:b:main", []item{{"agent:a:x y z", 7, 2, 1}, {"agent:b:main", 3, 1, 4}}, true},
		{"0 1 1 8 agent:é", []item{{"agent:é", 0, 1, 1}}, true}, // the length is in bytes
		{"0 1 1 13 agent:a:main", nil, false},
		{"0 12 agent:a:main", nil, false}, // the generations are missing (LIF-2)
		{"x 1 1 1 a", nil, false},
		{"0", nil, false},
	}
	for _, tt := range tests {
		var got []item
		err := eachOpened(tt.list, func(w string, l, tg, wg int64) { got = append(got, item{w, l, tg, wg}) })
		if (err == nil) != tt.ok {
			t.Errorf("eachOpened(%q): got error %v, want ok %v", tt.list, err, tt.ok)
			continue
		}
		if tt.ok && !cmp.Equal(got, tt.want) {
			t.Errorf("eachOpened(%q): got %v, want %v", tt.list, got, tt.want)
		}
	}
}

// Writers append notifying events to one target while its watchers acknowledge, across
// two store instances. M is derived from the head, so an Ack that read M before an
// append committed and wrote the cursor after would leave it synced below M: a notice
// lost (NTC-2, NTC-3). At the end every cursor with M > L has a pending notice.
func TestTwoInstances_AckRacesAppends(t *testing.T) {
	eachBackend(t, func(t *testing.T, open twoStores) {
		const writers, each, watchers = 8, 15, 6
		a, b := open(t)
		stores := []*Store{a, b}
		ctx := t.Context()
		target := awareness.SessionRef{AgentID: "main", Key: "agent:main:direct:alice"}
		var keys []string
		for i := range watchers {
			w := fmt.Sprintf("agent:main:subagent:w%02d", i)
			keys = append(keys, w)
			if _, _, err := a.Watch(ctx, w, target, "", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		var (
			writing  sync.WaitGroup
			acking   sync.WaitGroup
			done     = make(chan struct{})
			errOnce  sync.Once
			firstErr error
		)
		fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
		for w := range writers {
			writing.Go(func() {
				for range each {
					op := appendOp(t, humanIn(target.Key), time.Now())
					if err := stores[w%2].Append(ctx, []*awareness.AppendOp{op}); err != nil {
						fail(err)
						return
					}
				}
			})
		}
		for i, w := range keys {
			acking.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					req := awareness.AckRequest{Watcher: w, Targets: []awareness.SessionRef{target}, Now: time.Now()}
					if _, err := stores[i%2].Ack(ctx, req); err != nil {
						fail(err)
						return
					}
				}
			})
		}
		writing.Wait()
		close(done)
		acking.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		curs, err := b.Cursors(ctx, awareness.CursorQuery{TargetAgent: target.AgentID, TargetKey: target.Key})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range curs {
			if c.M > c.L && !c.Pending() {
				t.Errorf("cursor %s: L %d N %d M %d: events past L and no notice pending", c.Watcher, c.L, c.N, c.M)
			}
		}
	})
}
