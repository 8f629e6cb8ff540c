package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the long external readers of the lock test
)

// Storage faults (watch-semantics-and-fault-tests.md §9 tests 16, 17): a read-only
// database, a full disk, and lock contention. The faults are real: the tests run as
// root, where chmod does not stop writes, so the read-only case makes the files
// immutable (chattr +i, which also stops writes through descriptors already open),
// and the full disk is a small tmpfs mounted in a private mount namespace of the
// server (unshare -m), filled by a process entering that namespace (nsenter).

// faultLog tracks the appends of a fault test by unique runId.
type faultLog struct {
	session string
	acked   map[string]int64 // runId → sequence
	failed  map[string]string
	n       int
}

func newFaultLog(session string) *faultLog {
	return &faultLog{session: session, acked: map[string]int64{}, failed: map[string]string{}}
}

// append records one event; it returns the error code ("" when acknowledged). A
// transport failure is fatal: the server must answer every request during a fault.
func (f *faultLog) append(t *testing.T, s *server) string {
	t.Helper()
	f.n++
	runID := fmt.Sprintf("fault-%d", f.n)
	c := s.do("", recordMutation, map[string]any{"in": map[string]any{
		"sessionKey": f.session, "kind": "human_direct_message", "actorType": "human", "actorId": "user:alice", "runId": runID,
	}})
	if c.err != nil {
		t.Fatalf("append %s: %v", runID, c.err)
	}
	if c.status >= 500 {
		t.Fatalf("append %s: HTTP %d %+v", runID, c.status, c.resp.Errors)
	}
	if len(c.resp.Errors) > 0 {
		f.failed[runID] = c.code()
		return c.code()
	}
	var d struct {
		RecordEvent recordResult `json:"recordEvent"`
	}
	if err := json.Unmarshal(c.resp.Data, &d); err != nil || !d.RecordEvent.Recorded {
		t.Fatalf("append %s: %s %v", runID, c.resp.Data, err)
	}
	f.acked[runID] = d.RecordEvent.Event.Sequence
	return ""
}

// appendUntilOK retries until an append is acknowledged (the fault cleared).
func (f *faultLog) appendUntilOK(t *testing.T, s *server) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < wait {
		if f.append(t, s) == "" {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("appends still fail %v after the fault cleared", wait)
	return 0
}

// check verifies the log: dense, every acknowledged append at its sequence, no
// failed append present.
func (f *faultLog) check(t *testing.T, s *server) {
	t.Helper()
	events, head, gap := s.readLog(t, "", f.session)
	if gap || int64(len(events)) != head {
		t.Fatalf("%s: %d events for head %d (gap %v)", f.session, len(events), head, gap)
	}
	at := map[string]int64{}
	for i, e := range events {
		if e.Sequence != int64(i+1) {
			t.Fatalf("%s: event %d has sequence %d", f.session, i, e.Sequence)
		}
		at[e.RunID] = e.Sequence
	}
	for id, seq := range f.acked {
		if at[id] != seq {
			t.Errorf("acknowledged append %s (seq %d) is at %d", id, seq, at[id])
		}
	}
	for id, code := range f.failed {
		if _, ok := at[id]; ok {
			t.Errorf("append %s failed with %s but is in the log", id, code)
		}
	}
}

func TestFault_ReadOnlyDatabase_UnavailableThenRecovers_ERR1_SIG7(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := exec.Command("chattr", "+i", dir).Run(); err != nil {
		t.Skipf("chattr +i is not available here (%v): run as root on ext4/xfs to inject a read-only database", err)
	}
	_ = exec.Command("chattr", "-i", dir).Run()
	db := filepath.Join(dir, "awareness.db")
	s := startServer(t, db)
	f := newFaultLog("agent:main:subagent:ro")
	for range 5 {
		if code := f.append(t, s); code != "" {
			t.Fatalf("append before the fault: %s", code)
		}
	}
	// The database and its WAL: every commit writes the WAL, so each append meets
	// EPERM. Not the -shm file: SQLite maps it in memory, and a write fault on an
	// immutable mapping is SIGBUS, which kills the process (see RELIABILITY.md).
	files := []string{db, db + "-wal"}
	immutable := func(on bool) {
		flag := "-i"
		if on {
			flag = "+i"
		}
		for _, p := range files {
			if out, err := exec.Command("chattr", flag, p).CombinedOutput(); err != nil {
				t.Fatalf("chattr %s %s: %v %s", flag, p, err, out)
			}
		}
	}
	t.Cleanup(func() { immutable(false) }) // or TempDir's cleanup cannot remove them
	immutable(true)
	const faulty = 10
	for range faulty {
		if code := f.append(t, s); code != "UNAVAILABLE" {
			t.Fatalf("append to a read-only database: code %q, want UNAVAILABLE", code)
		}
	}
	immutable(false)
	took := f.appendUntilOK(t, s)
	for range 5 {
		if code := f.append(t, s); code != "" {
			t.Fatalf("append after recovery: %s", code)
		}
	}
	f.check(t, s)
	s.kill()
	s = startServer(t, db)
	f.check(t, s)
	t.Logf("read-only database: %d appends refused with UNAVAILABLE, none written; recovered %v after the fault cleared; %d acknowledged appends intact after kill -9", len(f.failed), took.Round(time.Millisecond), len(f.acked))
}

// inNamespace reports whether a tmpfs can be mounted in a private mount namespace.
func inNamespace(t *testing.T) {
	t.Helper()
	probe := t.TempDir()
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `mount -t tmpfs -o size=1m tmpfs "$0"`, probe).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs in a private mount namespace (%v %s): run as root with CAP_SYS_ADMIN to inject a full disk", err, out)
	}
}

func TestFault_DiskFull_UnavailableThenRecovers_ERR1_SIG7(t *testing.T) {
	t.Parallel()
	inNamespace(t)
	fsDir := t.TempDir()
	s := startServerWith(t, filepath.Join(fsDir, "awareness.db"), serverOpts{
		wrap: func(bin string, args []string) *exec.Cmd {
			// unshare and sh exec: the process started is the server itself.
			return exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
				`mount -t tmpfs -o size=16m tmpfs "$0" && exec "$@"`, fsDir, bin}, args...)...)
		},
	})
	pid := strconv.Itoa(s.cmd.Process.Pid)
	inside := func(args ...string) ([]byte, error) {
		return exec.Command("nsenter", append([]string{"-t", pid, "-m", "--"}, args...)...).CombinedOutput()
	}
	f := newFaultLog("agent:main:subagent:full")
	for range 5 {
		if code := f.append(t, s); code != "" {
			t.Fatalf("append before the fault: %s", code)
		}
	}
	filler := filepath.Join(fsDir, "filler")
	// Fill every block: big writes first, then small ones for the remainder.
	_, _ = inside("dd", "if=/dev/zero", "of="+filler, "bs=1M")
	_, _ = inside("dd", "if=/dev/zero", "of="+filler+"2", "bs=4k")
	out, _ := inside("df", "-k", fsDir)
	t.Logf("filled the tmpfs:\n%s", out)
	// The WAL reuses its allocated pages after a checkpoint, so appends may still
	// fit for a while; once they need a new block each one must fail cleanly.
	failedAt := -1
	for i := 0; i < 3000 && failedAt < 0; i++ {
		switch code := f.append(t, s); code {
		case "":
		case "UNAVAILABLE":
			failedAt = i
		default:
			t.Fatalf("append on a full disk: code %q, want UNAVAILABLE", code)
		}
	}
	if failedAt < 0 {
		t.Fatal("3000 appends fit on a full 16 MiB tmpfs: the fault never bit")
	}
	for range 10 {
		if code := f.append(t, s); code != "" && code != "UNAVAILABLE" {
			t.Fatalf("append on a full disk: code %q, want UNAVAILABLE", code)
		}
	}
	if out, err := inside("rm", "-f", filler, filler+"2"); err != nil {
		t.Fatalf("free the disk: %v %s", err, out)
	}
	took := f.appendUntilOK(t, s)
	for range 5 {
		if code := f.append(t, s); code != "" {
			t.Fatalf("append after recovery: %s", code)
		}
	}
	f.check(t, s)
	t.Logf("full disk: first refusal after %d appends that still fit; %d appends refused with UNAVAILABLE, none written; recovered %v after space was freed; %d acknowledged appends intact",
		failedAt, len(f.failed), took.Round(time.Millisecond), len(f.acked))
}

// SQLite under long readers, concurrent writers and checkpoints never surfaces
// SQLITE_BUSY ("database is locked") to a client: write transactions take the lock
// up front (BEGIN IMMEDIATE on one writer connection) and wait within busy_timeout.
func TestFault_SQLiteLongReadersAndEightWriters_NoBusy(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "awareness.db")
	// The readers ask as fast as they are answered: the per-caller query budget
	// (ERR-4, tested on its own) would refuse them, and this test is about the locks.
	s := startServerWith(t, db, serverOpts{args: []string{"--query-rate", "0"}})
	const (
		writers   = 8
		perWriter = 60
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		wg                             sync.WaitGroup
		errs                           sync.Map
		nErr, reads, heldTx, ckpts     atomic.Int64
		maxWAL                         atomic.Int64
		writesDone                     sync.WaitGroup
		externalReaders, statusReaders = 2, 4
	)
	fail := func(who string, err error) {
		nErr.Add(1)
		errs.Store(fmt.Sprintf("%s: %v", who, err), true)
	}
	// Long readers from another process's view: read transactions held for a second
	// each, which pin the WAL (checkpoints cannot finish behind them).
	u := "file:" + (&url.URL{Path: db}).EscapedPath() + "?mode=ro&_busy_timeout=10000&_txlock=deferred"
	ext, err := sql.Open("sqlite3", u)
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	for r := range externalReaders {
		wg.Go(func() {
			for ctx.Err() == nil {
				tx, err := ext.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Sprintf("external reader %d", r), err)
					}
					return
				}
				var n int64
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil && ctx.Err() == nil {
					fail(fmt.Sprintf("external reader %d", r), err)
				}
				heldTx.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				_ = tx.Rollback()
			}
		})
	}
	wg.Go(func() { // checkpoints from outside, besides the server's own
		for ctx.Err() == nil {
			if _, err := ext.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err == nil {
				ckpts.Add(1)
			}
			if fi, err := os.Stat(db + "-wal"); err == nil && fi.Size() > maxWAL.Load() {
				maxWAL.Store(fi.Size())
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	for r := range statusReaders {
		wg.Go(func() {
			for ctx.Err() == nil {
				c := s.do("", `query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0, limit: 200) { stateVersion stateChanges { events { sequence } } } }`,
					map[string]any{"k": fmt.Sprintf("agent:main:subagent:l%d", r%2)})
				if c.err != nil || len(c.resp.Errors) > 0 {
					if ctx.Err() == nil {
						fail(fmt.Sprintf("status reader %d", r), fmt.Errorf("%v %+v", c.err, c.resp.Errors))
					}
					continue
				}
				reads.Add(1)
			}
		})
	}
	start := time.Now()
	for w := range writers {
		writesDone.Go(func() {
			for i := range perWriter {
				c := s.do("", recordMutation, map[string]any{"in": map[string]any{
					"sessionKey": fmt.Sprintf("agent:main:subagent:l%d", (w+i)%2), "kind": "goal_changed", "actorType": "agent",
					"actorId": "agent:ops:main", "watchers": []string{mainWatcher}, "runId": fmt.Sprintf("l-%d-%d", w, i),
				}})
				if c.err != nil || len(c.resp.Errors) > 0 {
					fail(fmt.Sprintf("writer %d", w), fmt.Errorf("%v %+v", c.err, c.resp.Errors))
				}
			}
		})
	}
	writesDone.Wait()
	took := time.Since(start)
	stop()
	wg.Wait()
	errs.Range(func(k, _ any) bool {
		t.Error(k)
		return true
	})
	if logs := strings.ToLower(s.logs.String()); strings.Contains(logs, "database is locked") || strings.Contains(logs, "sqlite_busy") {
		t.Errorf("the server logged a lock error:\n%s", tail(s.logs.String(), 3000))
	}
	for _, k := range []string{"agent:main:subagent:l0", "agent:main:subagent:l1"} {
		events, head, _ := s.readLog(t, "", k)
		if int64(len(events)) != head || head != writers*perWriter/2 {
			t.Errorf("%s: %d events, head %d, want %d", k, len(events), head, writers*perWriter/2)
		}
	}
	t.Logf("lock contention: %d writers × %d appends in %v with %d long read transactions (1 s each), %d sessionStatus reads, %d external checkpoints; errors %d; WAL peaked at %d KiB",
		writers, perWriter, took.Round(time.Millisecond), heldTx.Load(), reads.Load(), ckpts.Load(), nErr.Load(), maxWAL.Load()/1024)
}
