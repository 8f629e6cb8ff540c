package main

// One SQLite file, one serving process. Notices reach the subscribers of the process
// that committed them; only the PostgreSQL listener carries them between processes,
// so a second serve on the same SQLite file would leave its notices unseen by the
// first one's subscribers. serve therefore holds an exclusive lock on a file beside
// the database, <db>.lock, from before the database opens until after it closes. The
// tools of cli.go take no lock: they may run beside the serving process.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// lockWait bounds how long serve waits for the lock of a process that is draining,
// which exits within its --shutdown-timeout, or, with --reuse-port, of one still
// serving: at the hand-over the operator stops it once the new process bound the port.
const lockWait = time.Minute

// lockPoll is how often a waiting serve tries the lock again.
const lockPoll = 20 * time.Millisecond

// Lock states, written into the lock file for a second serve to read.
const (
	lockServing  = "serving"
	lockDraining = "draining"
)

// lockHolder is what the lock file says about the process that holds it.
type lockHolder struct {
	PID   int       `json:"pid"`
	Addr  string    `json:"addr"`
	Since time.Time `json:"since"`
	State string    `json:"state"`
}

func (h lockHolder) String() string {
	if h.PID == 0 {
		return "another process"
	}
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Addr != "" {
		s += " on " + h.Addr
	}
	if !h.Since.IsZero() {
		s += " since " + h.Since.Format(time.RFC3339)
	}
	if h.State == lockDraining {
		s += ", shutting down"
	}
	return s
}

// dbLock is a held lock on a SQLite database.
type dbLock struct {
	fl     *flock.Flock
	holder lockHolder
}

func lockPath(db string) string { return db + ".lock" }

// errDatabaseInUse is the error of a serve whose database another process serves.
var errDatabaseInUse = errors.New("database in use")

// lockDatabase takes the lock of the SQLite database db for this process, serving on
// addr. If another process holds it, it waits while that one is draining, and with
// handOver, --reuse-port, also while it serves, at most lockWait; otherwise it
// returns an error naming that process at once.
func lockDatabase(ctx context.Context, db, addr string, handOver bool, log *slog.Logger) (*dbLock, error) {
	path := lockPath(db)
	fl := flock.New(path, flock.SetPermissions(0o600))
	deadline := time.Now().Add(lockWait)
	var waitingFor lockHolder
	for {
		ok, err := fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok {
			l := &dbLock{fl: fl, holder: lockHolder{PID: os.Getpid(), Addr: addr, Since: time.Now().UTC().Truncate(time.Second), State: lockServing}}
			if err := l.write(); err != nil {
				_ = fl.Unlock()
				return nil, err
			}
			if waitingFor.PID != 0 {
				log.Info("database lock taken over", "from_pid", waitingFor.PID)
			}
			return l, nil
		}
		holder := readLockHolder(path)
		inUse := fmt.Errorf("%w: --db %s is served by %s (lock file %s): a SQLite database is served by one process at a time; stop that one first, give this one another --db, or use PostgreSQL to serve one database from several processes",
			errDatabaseInUse, db, holder, path)
		if holder.State != lockDraining && !handOver {
			return nil, inUse
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (waited %v for it to exit)", inUse, lockWait)
		}
		if holder.PID != waitingFor.PID {
			waitingFor = holder
			log.Info("waiting for the database lock", "holder", holder.String(), "lock", path,
				"hint", "the process holding it exits at SIGTERM")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the database lock held by %s: %w", holder, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// readLockHolder reads what the lock file at path says; its zero value when it says
// nothing readable.
func readLockHolder(path string) lockHolder {
	var h lockHolder
	b, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal([]byte(strings.TrimSpace(string(b))), &h)
	}
	return h
}

// write records the holder in the lock file, in place: the lock belongs to the file,
// so it is never replaced or removed.
func (l *dbLock) write() error {
	b, err := json.Marshal(l.holder)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.fl.Path(), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("lock %s: %w", l.fl.Path(), err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", l.fl.Path(), err)
	}
	return nil
}

// draining records that the holder is shutting down: a serve started now waits for
// the lock instead of refusing.
func (l *dbLock) draining() error {
	l.holder.State = lockDraining
	return l.write()
}

// release unlocks; the file stays.
func (l *dbLock) release() error { return l.fl.Unlock() }
