package models

import (
	"context"
	"errors"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// goroutinesCreated is the number of goroutines the process has created so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A reconciliation read (REC-1) under a request's cancellable context starts no
// goroutine per row on SQLite: mattn/go-sqlite3 starts one for every row it reads
// under a context that can end, which is why the read transaction's statements run
// detached (beginRead). The read still ends with its context.
func TestSQLiteReadStatusStartsNoGoroutinePerRow(t *testing.T) {
	s := MustOpenSQLite(t)
	ctx := t.Context()
	ref := awareness.SessionRef{AgentID: "main", Key: "agent:main:direct:bob"}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const rows = 300
	ops := make([]*awareness.AppendOp, 0, rows)
	for i := range rows {
		ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: ref.Key, Kind: awareness.HumanDirectMessage,
			ActorType: awareness.ActorHuman}, now.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &awareness.AppendOp{New: ne, Now: now})
	}
	if err := s.Append(ctx, ops); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(ctx) // as net/http's request context
	defer cancel()
	if _, _, err := s.ReadStatus(rctx, ref, 0, rows); err != nil { // warm: statements prepared
		t.Fatal(err)
	}
	before := goroutinesCreated()
	ch, _, err := s.ReadStatus(rctx, ref, 0, rows)
	created := goroutinesCreated() - before
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Events) != rows {
		t.Fatalf("read %d events, want %d", len(ch.Events), rows)
	}
	// database/sql watches the transaction and each result set (a few goroutines);
	// one per row would be at least 300.
	if created >= rows/4 {
		t.Errorf("reading %d events started %d goroutines; want far fewer than one per row", rows, created)
	}

	cancel()
	if _, _, err := s.ReadStatus(rctx, ref, 0, rows); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadStatus under an ended context: err = %v, want context.Canceled", err)
	}
}
