package models

import (
	"context"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// BenchmarkAckExact is one exact acknowledgement of one pending notice (Store.Ack), the
// acknowledgement history's row included, on SQLite; the append that opens each notice
// is outside the timer.
func BenchmarkAckExact(b *testing.B) {
	s := MustOpenSQLite(b)
	ctx := context.Background()
	const watcher, key = "agent:main:main", "agent:main:subagent:w"
	target := awareness.SessionRef{AgentID: "main", Key: key}
	by := awareness.AckClient{Principal: "bench", Role: "admin", Transport: "http", Client: "bench/1"}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if err := s.Append(ctx, []*awareness.AppendOp{appendOp(b, humanIn(key, watcher), time.Now())}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := s.Ack(ctx, awareness.AckRequest{Watcher: watcher, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: int64(i + 1)}}, Now: time.Now(), By: by})
		if err != nil || len(res.Closed) != 1 {
			b.Fatalf("Ack %d: %+v, %v", i, res, err)
		}
	}
}
