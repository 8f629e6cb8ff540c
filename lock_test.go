package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// holdLock holds the lock of db as another serving process would, saying holder, until
// the returned release or the end of the test.
func holdLock(t *testing.T, db string, holder lockHolder) (release func()) {
	t.Helper()
	fl := flock.New(lockPath(db))
	if ok, err := fl.TryLock(); !ok || err != nil {
		t.Fatalf("lock %s: %v %v", lockPath(db), ok, err)
	}
	b, _ := json.Marshal(holder)
	if err := os.WriteFile(lockPath(db), b, 0o600); err != nil {
		t.Fatal(err)
	}
	release = func() { _ = fl.Unlock() }
	t.Cleanup(release)
	return release
}

var quietLog = slog.New(slog.DiscardHandler)

// One SQLite file, one serving process: a serve whose database another serving process
// holds refuses at once, naming it, unless that one is draining or this one hands
// over with --reuse-port; then it waits and takes the lock when the other releases it.
func TestDatabaseLock_OneServingProcessPerSQLiteFile(t *testing.T) {
	other := lockHolder{PID: 4242, Addr: "127.0.0.1:9999", Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), State: lockServing}

	t.Run("refused, naming the holder", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "a.db")
		holdLock(t, db, other)
		start := time.Now()
		_, err := lockDatabase(t.Context(), db, "127.0.0.1:8080", false, quietLog)
		if !errors.Is(err, errDatabaseInUse) {
			t.Fatalf("lockDatabase = %v, want errDatabaseInUse", err)
		}
		for _, want := range []string{db, "pid 4242 on 127.0.0.1:9999 since 2026-01-02T03:04:05Z", "PostgreSQL"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if d := time.Since(start); d > lockWait/2 {
			t.Errorf("refused after %v: it waited for a serving holder", d)
		}
	})

	for _, tc := range []struct {
		name     string
		state    string
		handOver bool
	}{
		{"waits for a draining holder", lockDraining, false},
		{"--reuse-port waits for a serving holder", lockServing, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "a.db")
			h := other
			h.State = tc.state
			release := holdLock(t, db, h)
			type result struct {
				l   *dbLock
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := lockDatabase(t.Context(), db, "127.0.0.1:8080", tc.handOver, quietLog)
				done <- result{l, err}
			}()
			select {
			case r := <-done:
				t.Fatalf("lockDatabase returned while the lock was held: %v", r.err)
			case <-time.After(10 * lockPoll):
			}
			release()
			r := <-done
			if r.err != nil {
				t.Fatalf("lockDatabase after the release: %v", r.err)
			}
			defer r.l.release()
			got := readLockHolder(lockPath(db))
			if got.PID != os.Getpid() || got.Addr != "127.0.0.1:8080" || got.State != lockServing {
				t.Errorf("lock file says %+v, want this process serving on 127.0.0.1:8080", got)
			}
			if err := r.l.draining(); err != nil {
				t.Fatal(err)
			}
			if got := readLockHolder(lockPath(db)); got.State != lockDraining {
				t.Errorf("after draining the lock file says %+v", got)
			}
		})
	}

	t.Run("a waiting serve stops with its context", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "a.db")
		h := other
		h.State = lockDraining
		holdLock(t, db, h)
		ctx, cancel := context.WithTimeout(t.Context(), 5*lockPoll)
		defer cancel()
		if _, err := lockDatabase(ctx, db, "127.0.0.1:8080", false, quietLog); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pid 4242") {
			t.Errorf("lockDatabase = %v, want the context's error naming pid 4242", err)
		}
	})
}
