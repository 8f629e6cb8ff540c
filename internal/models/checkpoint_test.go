package models

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// openCheckpointed opens a SQLite store whose checkpointer is stopped, so that the test
// runs its passes itself.
func openCheckpointed(t *testing.T, cfg CheckpointConfig) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ck.db")
	s, err := OpenSQLite(context.Background(), path, Options{Checkpoint: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	s.ckpt.Stop()
	return s, path
}

func appendN(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		op := appendOp(t, humanIn(fmt.Sprintf("agent:main:subagent:ck%d", i%7), "agent:main:main"), time.Now())
		if err := s.Append(context.Background(), []*awareness.AppendOp{op}); err != nil {
			t.Fatal(err)
		}
	}
}

// The write connection never checkpoints inside a commit: its auto-checkpoint is off,
// and so is the checkpointer's own; durability stays synchronous=FULL.
func TestCheckpoint_WriterHasNoAutoCheckpoint(t *testing.T) {
	s, _ := openCheckpointed(t, CheckpointConfig{})
	for _, db := range []struct {
		name string
		q    func(string) (int, error)
	}{
		{"writer", func(q string) (n int, err error) { return n, s.wsql.QueryRow(q).Scan(&n) }},
		{"checkpointer", func(q string) (n int, err error) { return n, s.ckdb.QueryRow(q).Scan(&n) }},
	} {
		n, err := db.q("PRAGMA wal_autocheckpoint")
		if err != nil || n != 0 {
			t.Errorf("%s: wal_autocheckpoint = %d, %v; want 0", db.name, n, err)
		}
		n, err = db.q("PRAGMA synchronous")
		if err != nil || n != 2 {
			t.Errorf("%s: synchronous = %d, %v; want 2 (FULL)", db.name, n, err)
		}
	}
	// More than SQLite's default auto-checkpoint threshold (1,000 pages): the log keeps
	// every frame until a pass of the checkpointer.
	appendN(t, s, 700)
	res, err := s.ckpt.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || res.LogFrames <= 1000 || res.Checkpointed != res.LogFrames {
		t.Fatalf("first pass = %+v; want the whole log of more than 1000 frames checkpointed", res)
	}
}

// A pass with no commit since the last complete checkpoint does nothing; a commit makes
// the next one run.
func TestCheckpoint_SkipsWithoutCommits(t *testing.T) {
	s, _ := openCheckpointed(t, CheckpointConfig{})
	ctx := context.Background()
	appendN(t, s, 3)
	if res, err := s.ckpt.RunOnce(ctx); err != nil || res.Skipped {
		t.Fatalf("pass after commits = %+v, %v; want it to run", res, err)
	}
	if res, err := s.ckpt.RunOnce(ctx); err != nil || !res.Skipped {
		t.Fatalf("pass without commits = %+v, %v; want skipped", res, err)
	}
	appendN(t, s, 1)
	if res, err := s.ckpt.RunOnce(ctx); err != nil || res.Skipped || res.LogFrames == 0 {
		t.Fatalf("pass after one more commit = %+v, %v; want it to checkpoint", res, err)
	}
}

// The log file is bounded: over MaxWALBytes a TRUNCATE checkpoint empties it, also
// when a reader held an old snapshot during the passive pass (the passive checkpoint
// then cannot copy everything, and the truncate waits for the reader).
func TestCheckpoint_BoundsTheLog(t *testing.T) {
	const bound = 256 << 10
	s, _ := openCheckpointed(t, CheckpointConfig{MaxWALBytes: bound})
	ctx := context.Background()

	appendN(t, s, 200)
	res, err := s.ckpt.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.WALBytes != 0 {
		t.Fatalf("pass over the bound = %+v; want truncated to 0 bytes", res)
	}

	// A reader on an old snapshot: the passive checkpoint stops short of the frames
	// it could still need, and the log grows.
	tx, err := s.rsql.BeginTx(ctx, s.d.readTx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 200)
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		tx.Rollback()
		close(released)
	}()
	res, err = s.ckpt.RunOnce(ctx)
	<-released
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.WALBytes != 0 {
		t.Fatalf("pass with a reader = %+v; want truncated to 0 bytes once the reader left", res)
	}
	// Under the bound, a pass only checkpoints.
	appendN(t, s, 2)
	res, err = s.ckpt.RunOnce(ctx)
	if err != nil || res.Truncated || res.WALBytes == 0 || res.WALBytes > bound {
		t.Fatalf("pass under the bound = %+v, %v; want a passive checkpoint only", res, err)
	}
	// And the data is all there.
	var events int
	if err := s.rsql.QueryRow("SELECT COUNT(*) FROM events").Scan(&events); err != nil || events != 402 {
		t.Fatalf("events = %d, %v; want 402", events, err)
	}
}

// Start and Stop: Stop waits for the goroutine, is idempotent and safe without Start;
// a started checkpointer runs passes on its own and none after Stop.
func TestCheckpoint_StartStop(t *testing.T) {
	s, _ := openCheckpointed(t, CheckpointConfig{Interval: 5 * time.Millisecond})
	c := s.ckpt
	c.Stop() // stopped already: no-op
	appendN(t, s, 2)
	c.Start(context.Background())
	c.Start(context.Background()) // started: no-op
	deadline := time.Now().Add(10 * time.Second)
	for c.Passes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no pass within 10 s of Start")
		}
		time.Sleep(time.Millisecond)
	}
	c.Stop()
	c.Stop()
	after := c.Passes()
	appendN(t, s, 2)
	time.Sleep(50 * time.Millisecond)
	if c.Passes() != after {
		t.Fatalf("passes went from %d to %d after Stop", after, c.Passes())
	}
	// Start again after Stop works, and a context that ends stops the loop too.
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	for c.Passes() == after {
		if time.Now().After(deadline) {
			t.Fatal("no pass within 10 s of the second Start")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	c.Stop()
}

// Under a steady write load a pass starts after every EveryCommits commits, without
// waiting for the interval.
func TestCheckpoint_PassEveryCommits(t *testing.T) {
	s, _ := openCheckpointed(t, CheckpointConfig{Interval: time.Hour, Frames: 10})
	c := s.ckpt
	c.Start(context.Background())
	defer c.Stop()
	appendN(t, s, 9)
	time.Sleep(20 * time.Millisecond)
	if c.Passes() != 0 {
		t.Fatalf("%d passes after 9 commits, want 0", c.Passes())
	}
	appendN(t, s, 1)
	deadline := time.Now().Add(10 * time.Second)
	for c.Passes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no pass within 10 s of the 10th commit")
		}
		time.Sleep(time.Millisecond)
	}
}

// By default SQLite's auto-checkpoint stays on the writer and no checkpointer runs.
func TestCheckpoint_OffByDefault(t *testing.T) {
	s := mustOpenAt(t, filepath.Join(t.TempDir(), "d.db"))
	var n int
	if err := s.wsql.QueryRow("PRAGMA wal_autocheckpoint").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("wal_autocheckpoint = %d, %v; want SQLite's default 1000", n, err)
	}
	if s.ckpt != nil {
		t.Fatal("a checkpointer runs without Options.Checkpoint.Enabled")
	}
}
