package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mattn/go-sqlite3"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/storetest"
)

// MustOpenSQLite opens a store on a new database file in a temporary directory and
// closes it when the test ends.
func MustOpenSQLite(tb testing.TB) *Store {
	tb.Helper()
	return mustOpenAt(tb, filepath.Join(tb.TempDir(), "awareness.db"))
}

func mustOpenAt(tb testing.TB, path string) *Store {
	tb.Helper()
	s, err := OpenSQLite(context.Background(), path, Options{})
	if err != nil {
		tb.Fatalf("OpenSQLite: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestSQLiteConformance(t *testing.T) {
	storetest.RunAll(t, func(t *testing.T) awareness.Store { return MustOpenSQLite(t) }, plantCursor)
}

// plantCursor writes a cursor row as given, for storetest.RunSweep.
func plantCursor(t *testing.T, s awareness.Store, c awareness.Cursor) {
	t.Helper()
	if err := s.(*Store).write(t.Context(), "plant", func(tx *tx) error { return tx.saveCursor(c) }); err != nil {
		t.Fatalf("plant %+v: %v", c, err)
	}
}

func TestSQLitePragmas(t *testing.T) {
	s := MustOpenSQLite(t)
	ctx := t.Context()
	pragma := func(db *Store, write bool, name string) string {
		t.Helper()
		var v string
		var err error
		if write { // the pinned write connection
			err = db.write(ctx, "pragma", func(tx *tx) error {
				_, err := tx.scanRow([]any{&v}, "PRAGMA "+name)
				return err
			})
		} else {
			_, err = onPool(ctx, db.r).scanRow([]any{&v}, "PRAGMA "+name)
		}
		if err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	tests := []struct {
		write      bool
		name, want string
	}{
		{true, "journal_mode", "wal"},
		{true, "foreign_keys", "1"},
		{true, "busy_timeout", "10000"},
		{true, "synchronous", "2"}, // FULL
		{false, "journal_mode", "wal"},
		{false, "foreign_keys", "1"},
		{false, "busy_timeout", "10000"},
		{false, "query_only", "1"},
	}
	for _, tt := range tests {
		if got := pragma(s, tt.write, tt.name); got != tt.want {
			t.Errorf("PRAGMA %s (write pool %v): got %q, want %q", tt.name, tt.write, got, tt.want)
		}
	}
	// The read pool cannot write.
	if err := s.r.WithContext(ctx).Exec("DELETE FROM meta").Error; err == nil {
		t.Errorf("read pool accepted a write")
	}
}

func TestSQLiteReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "awareness.db")
	ctx := t.Context()
	now := time.Date(2026, 3, 1, 12, 0, 0, 999, time.UTC)
	s, err := OpenSQLite(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := awareness.SessionRef{AgentID: "main", Key: "agent:main:direct:bob"}
	if _, _, err := s.Watch(ctx, "agent:main:main", ref, "", now); err != nil {
		t.Fatal(err)
	}
	ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: ref.Key, Kind: awareness.HumanDirectMessage,
		ActorType: awareness.ActorHuman}, now)
	if err != nil {
		t.Fatal(err)
	}
	op := &awareness.AppendOp{New: ne, Now: now}
	if err := s.Append(ctx, []*awareness.AppendOp{op}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := mustOpenAt(t, path)
	ch, err := s2.ReadChanges(ctx, ref, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]awareness.Event{op.Event}, ch.Events); diff != "" {
		t.Errorf("events after reopen (-want +got):\n%s", diff)
	}
	// Pending notices are durable state (NTC-5) with the same identity.
	pend, err := s2.Pending(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(op.Opened, pend); diff != "" {
		t.Errorf("pending after reopen (-want +got):\n%s", diff)
	}
	if len(pend) == 1 && pend[0].ID() != op.Opened[0].ID() {
		t.Errorf("notice ID after reopen: got %q, want %q", pend[0].ID(), op.Opened[0].ID())
	}
}

func TestSQLiteMigrationsVersioned(t *testing.T) {
	s := MustOpenSQLite(t)
	ctx := t.Context()
	// Both dialects carry the same versions, increasing from 00001_init.sql (a number
	// may be skipped: parallel work reserves its numbers).
	var lists [][]string
	var latest int64
	for _, d := range []string{"sqlite", "postgres"} {
		fsys, err := MigrationsFS(d)
		if err != nil {
			t.Fatal(err)
		}
		names, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 || names[0] != "00001_init.sql" {
			t.Fatalf("%s migrations: got %v, want 00001_init.sql first", d, names)
		}
		latest = 0
		for _, n := range names {
			v, err := strconv.ParseInt(strings.SplitN(n, "_", 2)[0], 10, 64)
			if err != nil || v <= latest || !strings.HasPrefix(n, fmt.Sprintf("%05d_", v)) {
				t.Errorf("%s migration %q: want a five-digit version above %d", d, n, latest)
			}
			latest = v
		}
		lists = append(lists, names)
	}
	if diff := cmp.Diff(lists[0], lists[1]); diff != "" {
		t.Errorf("sqlite and postgres migrations differ (-sqlite +postgres):\n%s", diff)
	}
	if _, err := MigrationsFS("mysql"); err == nil {
		t.Errorf("MigrationsFS(mysql): want an error")
	}
	current, target, err := s.status.GetVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if current != latest || target != latest {
		t.Errorf("versions: got current %d target %d, want %d %d", current, target, latest, latest)
	}
	var applied int64
	if _, err := s.reader(ctx).scanRow([]any{&applied},
		"SELECT COUNT(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0 AND is_applied"); err != nil {
		t.Fatal(err)
	}
	if applied != int64(len(lists[0])) {
		t.Errorf("applied versions in goose_db_version: got %d, want %d", applied, len(lists[0]))
	}
}

func TestSQLitePingDetectsMissingMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "awareness.db")
	s := mustOpenAt(t, path)
	ctx := t.Context()
	if err := s.write(ctx, "test", func(t *tx) error {
		_, err := t.exec("DELETE FROM goose_db_version WHERE version_id = 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if code := awareness.ErrorCode(s.Ping(ctx)); code != awareness.EUNAVAILABLE {
		t.Errorf("Ping with a missing migration: got code %q, want %s", code, awareness.EUNAVAILABLE)
	}
}

func TestSQLiteRefusesMemory(t *testing.T) {
	for _, p := range []string{"", ":memory:"} {
		if s, err := OpenSQLite(t.Context(), p, Options{}); err == nil {
			s.Close()
			t.Errorf("OpenSQLite(%q): want an error", p)
		}
	}
}

func TestSQLiteErrorsHideSQL(t *testing.T) {
	s := MustOpenSQLite(t)
	err := s.write(t.Context(), "test", func(t *tx) error {
		_, err := t.exec("INSERT INTO nowhere VALUES (1)")
		return err
	})
	if code := awareness.ErrorCode(err); code != awareness.EINTERNAL {
		t.Errorf("code: got %q, want %s", code, awareness.EINTERNAL)
	}
	if msg := awareness.ErrorMessage(err); msg != "internal error" {
		t.Errorf("message: got %q, want the generic one", msg)
	}
}

func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"cron:", "cron;", true},
		{"a_", "a`", true},
		{"é", "ê", true},
		{"a\U0010FFFF", "b", true},
		{"\U0010FFFF", "", false},
		{"\uD7FF", "\uE000", true},
	}
	for _, tt := range tests {
		got, ok := prefixEnd(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("prefixEnd(%q): got %q %v, want %q %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// RDL-1 across a restart: a drained notice stays held (the drain is stored), comes
// back once, redelivered, after the stated turns counted across the restart, and the
// pair still has its one pending notice.
func TestSQLiteDrainSurvivesRestart_RDL1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "awareness.db")
	ctx := t.Context()
	pol := awareness.HoldPolicy{RedeliverTurns: 2, RedeliverAfter: time.Hour, MaxSnooze: time.Hour}
	open := func() (*Store, *awareness.Service) {
		s := mustOpenAt(t, path)
		return s, awareness.NewService(awareness.Config{Store: s, Holds: pol})
	}
	const w = "agent:main:main"
	s, svc := open()
	for _, k := range []string{"agent:main:direct:a", "agent:main:direct:b"} {
		if _, err := svc.Watch(ctx, w, k, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: k, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := svc.DrainNotices(ctx, w)
	if err != nil || len(d) != 2 {
		t.Fatalf("drain: %+v, %v", d, err)
	}
	var a, b awareness.Notice
	for _, n := range d {
		if n.Target.Key == "agent:main:direct:a" {
			a = n
		} else {
			b = n
		}
	}
	refOf := func(n awareness.Notice) awareness.NoticeRef {
		return awareness.NoticeRef{Target: n.Target.Key, TargetAgentID: &n.Target.AgentID, NotifiedVersion: n.NotifiedVersion}
	}
	// A turn acknowledges b only: one turn for a. Then the service restarts.
	if _, err := svc.AcknowledgeNotices(ctx, w, []awareness.NoticeRef{refOf(b)}); err != nil {
		t.Fatal(err)
	}
	svc.Flush()
	s.Close()
	s, svc = open()
	defer s.Close()
	if got, _ := svc.DrainNotices(ctx, w); len(got) != 0 {
		t.Fatalf("after the restart a held notice was drained again: %+v", got)
	}
	// A second turn (an exact ack naming nothing of a) brings a back, redelivered.
	if _, err := svc.AcknowledgeNotices(ctx, w, []awareness.NoticeRef{refOf(b)}); err != nil {
		t.Fatal(err)
	}
	got, err := svc.DrainNotices(ctx, w)
	if err != nil || len(got) != 1 || got[0].Target != a.Target || got[0].NotifiedVersion != a.NotifiedVersion || !got[0].Redelivered || got[0].Delivery != 1 {
		t.Fatalf("after two turns: %+v, %v; want a, redelivered", got, err)
	}
	if ns, _ := s.Pending(ctx, w); len(ns) != 1 {
		t.Fatalf("pending: %+v, want one notice", ns)
	}
	// maxRedeliver 1 is used up: a failed turn again does not hide it.
	if again, _ := svc.DrainNotices(ctx, w); len(again) != 1 {
		t.Fatalf("a notice whose redeliveries are used up was held: %+v", again)
	}
}

// withWritePool runs f with s's write pool, on SQLite with the pinned write connection
// given back to it for the time of f (the next write transaction takes it again).
func withWritePool(t testing.TB, s *Store, f func(db *sql.DB)) {
	t.Helper()
	if s.pin != nil {
		s.pin.sem <- struct{}{}
		s.pin.drop(false)
		defer s.pin.release()
	}
	f(s.wsql)
}

// The pinned write connection is never left inside a transaction: not after a COMMIT
// that failed (a deferred foreign key), a transaction whose context ended before its
// commit, or a panic inside it. Each rolls back, and the next write runs.
func TestSQLitePinnedConnEndsEveryTransaction(t *testing.T) {
	s := MustOpenSQLite(t)
	ctx := t.Context()
	const mark = "UPDATE meta SET last_prune_at = 42 WHERE id = 1"
	marked := func() bool {
		t.Helper()
		var at sql.NullInt64
		if _, err := s.reader(ctx).scanRow([]any{&at}, "SELECT last_prune_at FROM meta WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		return at.Valid && at.Int64 == 42
	}
	outside := func(what string) {
		t.Helper()
		open := true
		s.pin.sem <- struct{}{}
		if s.pin.conn != nil {
			if err := s.pin.conn.Raw(func(dc any) error {
				open = !dc.(*sqlite3.SQLiteConn).AutoCommit()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		} else {
			open = false // dropped; the next write takes a fresh one
		}
		s.pin.release()
		if open {
			t.Fatalf("after %s: the pinned connection is inside a transaction", what)
		}
		if marked() {
			t.Fatalf("after %s: its write is visible", what)
		}
		if err := s.write(ctx, "next", func(t *tx) error { _, err := t.exec("UPDATE meta SET last_prune_at = NULL WHERE id = 1"); return err }); err != nil {
			t.Fatalf("the write after %s: %v", what, err)
		}
	}

	err := s.write(ctx, "failed commit", func(t *tx) error {
		if _, err := t.exec(mark); err != nil {
			return err
		}
		if _, err := t.exec("PRAGMA defer_foreign_keys = ON"); err != nil {
			return err
		}
		_, err := t.exec("INSERT INTO events (" + eventColumns + ") VALUES ('x', 'agent:x:main', 1, 'k', 'human', NULL, '', 0, NULL, NULL, NULL, 0)")
		return err
	})
	if se := (sqlite3.Error{}); !errors.As(err, &se) || se.Code != sqlite3.ErrConstraint {
		t.Fatalf("commit with a dangling foreign key: got %v, want a constraint failure", err)
	}
	outside("a failed COMMIT")

	cctx, cancel := context.WithCancel(ctx)
	err = s.write(cctx, "cancelled", func(t *tx) error {
		_, err := t.exec(mark)
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("write whose context ended before its commit: got %v, want context.Canceled", err)
	}
	outside("a cancelled context")

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		s.write(ctx, "panic", func(t *tx) error {
			if _, err := t.exec(mark); err != nil {
				return err
			}
			panic("in the transaction")
		})
	}()
	outside("a panic")
}
