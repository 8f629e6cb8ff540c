package models

import (
	"bufio"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sync"
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
// and so is the checkpointer's own; durability stays synchronous=FULL on both (the
// checkpoint fsyncs the database file before the log can be reused).
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

// Commits wake a pass without waiting for the interval: the first after
// minCommitsPerPass commits, the next ones when the commits should have filled Frames
// pages (learned from the last pass).
func TestCheckpoint_CommitsWakeAPass(t *testing.T) {
	s, _ := openCheckpointed(t, CheckpointConfig{Interval: time.Hour, Frames: 10})
	c := s.ckpt
	c.Start(context.Background())
	defer c.Stop()
	waitPasses := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for c.Passes() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d passes after %d commits within 10 s, want %d", c.Passes(), s.commits.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	appendN(t, s, minCommitsPerPass-1)
	time.Sleep(20 * time.Millisecond)
	if c.Passes() != 0 {
		t.Fatalf("%d passes after %d commits, want 0", c.Passes(), minCommitsPerPass-1)
	}
	appendN(t, s, 1)
	waitPasses(1)
	// An append writes more than 10 pages: from now on every minCommitsPerPass-th
	// commit wakes a pass.
	if next := c.next.Load(); next != s.commits.Load()+minCommitsPerPass {
		t.Fatalf("next pass at commit %d, want %d", next, s.commits.Load()+minCommitsPerPass)
	}
	appendN(t, s, minCommitsPerPass)
	waitPasses(2)
}

// With InCommit SQLite's auto-checkpoint stays on the writer and no checkpointer runs.
func TestCheckpoint_InCommitLeavesItToSQLite(t *testing.T) {
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "d.db"), Options{Checkpoint: CheckpointConfig{InCommit: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	if err := s.wsql.QueryRow("PRAGMA wal_autocheckpoint").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("wal_autocheckpoint = %d, %v; want SQLite's default 1000", n, err)
	}
	if s.ckpt != nil {
		t.Fatal("a checkpointer runs with InCommit")
	}
}

// By default the checkpointer runs.
func TestCheckpoint_OnByDefault(t *testing.T) {
	s := mustOpenAt(t, filepath.Join(t.TempDir(), "d.db"))
	if s.ckpt == nil {
		t.Fatal("no checkpointer by default")
	}
}

// besideTx makes the checkpointer's background checkpoints run beside a write
// transaction (begun before, committed after each, and counted), on the first n of
// them (n < 0: all).
func besideTx(t *testing.T, s *Store, n int) {
	s.ckpt.beside = func() func() {
		if n == 0 {
			return func() {}
		}
		n--
		tx, err := s.wsql.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("UPDATE sessions SET updated_at = updated_at + 1"); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
			s.commits.Add(1) // as the store's own commits do
		}
	}
}

// checkLogReused runs cycles of 30 appends and a pass, each checked by check, and fails
// unless the log file keeps the size of one cycle: the log restarts after every pass.
// (A background checkpoint's answer is about the log as it was when it began; a
// transaction that began before it ended does not restart the log, nor do the next
// ones, and the file grows by every commit.)
func checkLogReused(t *testing.T, s *Store, path string, check func(cycle int, res CheckpointResult)) {
	t.Helper()
	var first int64
	for cycle := range 20 {
		appendN(t, s, 30)
		res, err := s.ckpt.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		check(cycle, res)
		size := walFileSize(t, path)
		if cycle == 0 {
			first = size
			continue
		}
		if size > 2*first {
			t.Fatalf("cycle %d: the log file is %d bytes, after the first cycle %d: the log is not reused", cycle, size, first)
		}
	}
}

// A writer that commits beside the first background checkpoint of every pass: the
// second finds the log quiet, and the step with the writer held has nothing to copy.
func TestCheckpoint_LogReusedBesideTheWriter(t *testing.T) {
	s, path := openCheckpointed(t, CheckpointConfig{})
	checkLogReused(t, s, path, func(cycle int, res CheckpointResult) {
		besideTx(t, s, 1) // for the next pass
		if cycle > 0 && (res.Tries != 2 || res.Finished || !res.Complete) {
			t.Fatalf("cycle %d: pass = %+v; want quiet at the second try, complete, nothing left for the writer held", cycle, res)
		}
	})
}

// A writer that never pauses (it commits beside every background checkpoint): after
// besideTries of them the pass copies the rest with the writer held, and the log is
// reused.
func TestCheckpoint_WriterThatNeverPauses(t *testing.T) {
	s, path := openCheckpointed(t, CheckpointConfig{})
	besideTx(t, s, -1)
	checkLogReused(t, s, path, func(cycle int, res CheckpointResult) {
		if res.Tries != besideTries || !res.Finished || !res.Complete || res.Held == 0 {
			t.Fatalf("cycle %d: pass = %+v; want %d tries, then finished with the writer held, complete", cycle, res, besideTries)
		}
	})
}

// Under sustained writes with the checkpointer running, the log file ends within its
// bound: after the checkpointer's next pass and one more commit (which restarts the
// log, and SQLite trims the file to journal_size_limit) it is at most a quarter of
// MaxWALBytes plus that commit's frames.
func TestCheckpoint_SustainedWritesStayWithinTheBound(t *testing.T) {
	const bound = 1 << 20
	s, path := openCheckpointed(t, CheckpointConfig{Interval: 10 * time.Millisecond, Frames: 100, MaxWALBytes: bound})
	var n int
	if err := s.wsql.QueryRow("PRAGMA journal_size_limit").Scan(&n); err != nil || n != bound/4 {
		t.Fatalf("journal_size_limit = %d, %v; want %d", n, err, bound/4)
	}
	s.ckpt.Start(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { appendN(t, s, 600) })
	}
	wg.Wait()
	s.ckpt.Stop()
	if s.ckpt.Passes() == 0 {
		t.Fatal("no pass during 1,200 appends")
	}
	res, err := s.ckpt.RunOnce(context.Background())
	if err != nil || !res.Complete || res.WALBytes > bound {
		t.Fatalf("last pass = %+v, %v; want complete, the file within %d bytes", res, err, bound)
	}
	appendN(t, s, 1)
	if size := walFileSize(t, path); size > bound/4+64<<10 {
		t.Fatalf("log file %d bytes after a restart, want at most %d + one commit", size, bound/4)
	}
}

func walFileSize(t *testing.T, db string) int64 {
	t.Helper()
	fi, err := os.Stat(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A kill -9 while the checkpointer copies and restarts the log beside a writer loses
// no acknowledged append (SIG-7). The child process (this test binary, re-run with
// ckptChildEnv) appends to one session with a pass every few commits and reports each
// acknowledged append on stdout; the parent kills it after a number of them, reopens
// the database and counts the session's events, over several rounds on one file.
func TestCheckpoint_KillNineLosesNoAcknowledgedAppend_SIG7(t *testing.T) {
	if db := os.Getenv(ckptChildEnv); db != "" {
		ckptChild(db)
		return
	}
	db := filepath.Join(t.TempDir(), "crash.db")
	var acked int
	for round := range 4 {
		cmd := osexec.Command(os.Args[0], "-test.run", "^TestCheckpoint_KillNineLosesNoAcknowledgedAppend_SIG7$")
		cmd.Env = append(os.Environ(), ckptChildEnv+"="+db)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAt := 300 + 400*round // acknowledged appends of this round before the kill
		sc := bufio.NewScanner(out)
		var n int
		var passes int64
		for n < killAt && sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "ack %d", &passes); err != nil {
				t.Fatalf("child said %q", sc.Text())
			}
			n++
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if n < killAt {
			t.Fatalf("round %d: the child stopped after %d appends", round, n)
		}
		if passes == 0 {
			t.Fatalf("round %d: no checkpoint pass ran before the kill", round)
		}
		acked += n
		s, err := OpenSQLite(context.Background(), db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var events int
		err = s.rsql.QueryRow("SELECT COUNT(*) FROM events WHERE session_key = ?", ckptChildKey).Scan(&events)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		// Appends after the last acknowledged one may have committed too.
		if events < acked {
			t.Fatalf("round %d: %d events after the kill, %d acknowledged: lost %d", round, events, acked, acked-events)
		}
		t.Logf("round %d: killed after %d acknowledged appends (%d checkpoint passes); %d events, %d acknowledged in all", round, n, passes, events, acked)
		acked = events // the next round counts from what survived
	}
}

const (
	ckptChildEnv = "AWARENESS_CHECKPOINT_CHILD_DB"
	ckptChildKey = "agent:main:subagent:crash"
)

// ckptChild appends until killed, printing "ack <passes>" after each acknowledged
// append.
func ckptChild(db string) {
	s, err := OpenSQLite(context.Background(), db, Options{Checkpoint: CheckpointConfig{Interval: 2 * time.Millisecond, Frames: 50}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		now := time.Now()
		ne, err := awareness.ValidateRecord(humanIn(ckptChildKey, "agent:main:main"), now)
		if err == nil {
			err = s.Append(context.Background(), []*awareness.AppendOp{{New: ne, Now: now}})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(w, "ack %d\n", s.ckpt.Passes())
		w.Flush()
	}
}
