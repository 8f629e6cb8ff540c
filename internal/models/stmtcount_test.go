package models

import (
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// The statements of one append transaction on a session that has a head, besides
// BEGIN and COMMIT: the floor of the append path, held by wantMax. (Before the head
// read was folded into the bump: 3, 5, 6, 5 on SQLite and 2, 5, 5, 4 on PostgreSQL.)
func TestAppendStatementCount(t *testing.T) {
	type want struct{ logOnly, notify, notifyOpens, dedupe, built int64 }
	for _, tc := range []struct {
		name    string
		open    func(testing.TB) *Store
		wantMax want
	}{
		{"sqlite", func(tb testing.TB) *Store { return MustOpenSQLite(tb) }, want{2, 4, 5, 3, 0}},
		{"postgres", func(tb testing.TB) *Store { return MustOpenPostgres(tb) }, want{1, 3, 3, 3, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			var n stmtCount
			s.count = &n
			ctx := t.Context()
			now := time.Unix(1_700_000_000, 0).UTC()
			const key = "agent:main:count"
			var got want
			count := func(in awareness.RecordInput) int64 {
				t.Helper()
				now = now.Add(time.Second)
				op := appendOp(t, in, now)
				before, built := n.all.Load(), n.built.Load()
				if err := s.Append(ctx, []*awareness.AppendOp{op}); err != nil {
					t.Fatal(err)
				}
				if !op.Recorded {
					t.Fatal("not recorded")
				}
				got.built += n.built.Load() - built
				return n.all.Load() - before
			}
			agent := "main"
			logOnly := awareness.RecordInput{SessionKey: key, Kind: awareness.RunCompleted, ActorType: awareness.ActorAgent, ActorID: &agent}
			count(logOnly) // the head
			got = want{}
			got.logOnly = count(logOnly)
			got.notify = count(humanIn(key))
			if _, _, err := s.Watch(ctx, "agent:w:main", awareness.SessionRef{AgentID: "main", Key: key}, "", now); err != nil {
				t.Fatal(err)
			}
			got.notifyOpens = count(humanIn(key))
			dk := "dk-1"
			in := logOnly
			in.DedupeKey = &dk
			got.dedupe = count(in)
			t.Logf("statements per append: log-only %d, notifying %d, notifying that opens a notice %d, log-only with a dedupe key %d; %d of them built by GORM",
				got.logOnly, got.notify, got.notifyOpens, got.dedupe, got.built)
			if got.logOnly > tc.wantMax.logOnly || got.notify > tc.wantMax.notify ||
				got.notifyOpens > tc.wantMax.notifyOpens || got.dedupe > tc.wantMax.dedupe || got.built > tc.wantMax.built {
				t.Errorf("statements per append: got %+v, want at most %+v", got, tc.wantMax)
			}
		})
	}
}
