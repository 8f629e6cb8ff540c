package models

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/modeltest"
	"github.com/awareness/awareness/internal/models/pgtest"
	"github.com/awareness/awareness/internal/models/storetest"
)

// The PostgreSQL tests run when TEST_DATABASE_URL names a server (an admin URL); each
// test gets a database of its own (pgtest.NewDatabase). Without it they skip, saying so.

// MustOpenPostgres opens a store on a new database and closes it when the test ends.
func MustOpenPostgres(tb testing.TB) *Store {
	tb.Helper()
	return mustOpenPostgresAt(tb, pgtest.NewDatabase(tb))
}

func mustOpenPostgresAt(tb testing.TB, dsn string) *Store {
	tb.Helper()
	s, err := OpenPostgres(context.Background(), dsn, Options{})
	if err != nil {
		tb.Fatalf("OpenPostgres: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestPostgresConformance(t *testing.T) {
	pgtest.AdminURL(t)
	storetest.RunAll(t, func(t *testing.T) awareness.Store { return MustOpenPostgres(t) }, plantCursor)
}

// pgModelChecks is rapid's run count of the PostgreSQL model test unless
// -rapid.checks is given: every step is a few network round trips, and a restart
// reconnects, so the default 100 runs would take a minute.
const pgModelChecks = 20

// TestPostgresNoticeModel is the model-based property test of SPEC §3–4 on PostgreSQL,
// restarts and other processes' starts included. The runs share one database, emptied before each run (creating a
// database per run would dominate the test's time).
func TestPostgresNoticeModel(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	fewerRapidChecks(t, pgModelChecks)
	first := true
	modeltest.Run(t, func(t *testing.T) modeltest.Database {
		open := func() (awareness.Store, error) { return OpenPostgres(context.Background(), dsn, Options{}) }
		if !first {
			if err := emptyPostgres(dsn); err != nil {
				t.Fatalf("empty the database: %v", err)
			}
		}
		first = false
		return open
	}, modeltest.Options{OtherProcess: true})
}

// fewerRapidChecks sets -rapid.checks to n for the test, unless the command line set
// it. Top-level tests run one at a time unless they call t.Parallel, so no other rapid
// test sees the change.
func fewerRapidChecks(t *testing.T, n int) {
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("rapid's -rapid.checks flag is not registered")
	}
	given := false
	flag.Visit(func(g *flag.Flag) { given = given || g == f })
	if given {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// emptyPostgres deletes every row of a migrated database except the migration record
// and the meta row (which it resets).
func emptyPostgres(dsn string) error {
	// DELETE is much faster than TRUNCATE on small tables; a table still referenced
	// waits for the next pass.
	return pgtest.Exec(dsn, `DO $$
DECLARE
  t text;
  done boolean;
BEGIN
  FOR pass IN 1..10 LOOP
    done := true;
    FOR t IN SELECT tablename FROM pg_tables
             WHERE schemaname = current_schema() AND tablename NOT IN ('goose_db_version', 'meta') LOOP
      BEGIN
        EXECUTE format('DELETE FROM %I', t);
      EXCEPTION WHEN foreign_key_violation THEN
        done := false;
      END;
    END LOOP;
    EXIT WHEN done;
  END LOOP;
  IF NOT done THEN
    RAISE EXCEPTION 'could not empty the tables';
  END IF;
  UPDATE meta SET last_prune_at = NULL;
END $$`)
}

func TestPostgresOpenErrors(t *testing.T) {
	ctx := t.Context()
	// Nothing listens on port 1: connection refused is UNAVAILABLE-worthy, and the
	// message names the target without the password.
	_, err := OpenPostgres(ctx, "postgres://u:secret@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", Options{})
	if err == nil {
		t.Fatal("OpenPostgres on a closed port succeeded")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password: %v", err)
	}
	if !pgUnavailable(err) {
		t.Errorf("connection refused is not classified unavailable: %v", err)
	}
	if _, err := OpenPostgres(ctx, "postgres://u:secret@[::1/db", Options{}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad DSN: err %v", err)
	}
	if err := CheckPostgresDSN("/tmp/x.db"); err == nil {
		t.Error("CheckPostgresDSN accepted a file path")
	}
	if got, want := RedactDSN("postgres://u:secret@h:5432/db?sslmode=disable"), "postgres://u:xxxxx@h:5432/db?sslmode=disable"; got != want {
		t.Errorf("RedactDSN: got %q, want %q", got, want)
	}
	if got := RedactDSN("postgresql://h/db?password=secret"); strings.Contains(got, "secret") {
		t.Errorf("RedactDSN leaves a query password: %q", got)
	}
	for db, want := range map[string]bool{
		"postgres://h/db": true, "PostgreSQL://h/db": true, " postgresql://h": true,
		"./awareness.db": false, "postgres.db": false, "file:x.db": false,
	} {
		if got := IsPostgresDSN(db); got != want {
			t.Errorf("IsPostgresDSN(%q) = %v, want %v", db, got, want)
		}
	}
}

func TestPostgresErrorClassification(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		name        string
		err         error
		unavailable bool
		retry       bool
	}{
		{"connection failure", pg("08006"), true, false},
		{"too many connections", pg("53300"), true, false},
		{"disk full", pg("53100"), true, false},
		{"admin shutdown (terminated backend)", pg("57P01"), true, false},
		{"cannot connect now", pg("57P03"), true, false},
		{"serialization failure", pg("40001"), true, true},
		{"deadlock", pg("40P01"), true, true},
		{"unique violation", pg("23505"), false, false},
		{"syntax error", pg("42601"), false, false},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true, false},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true, false},
		{"cut short", io.ErrUnexpectedEOF, true, false},
		{"plain", errors.New("boom"), false, false},
	}
	s := &Store{d: pgDialect}
	for _, tt := range tests {
		if got := pgUnavailable(tt.err); got != tt.unavailable {
			t.Errorf("%s: unavailable %v, want %v", tt.name, got, tt.unavailable)
		}
		if got := pgRetryable(tt.err); got != tt.retry {
			t.Errorf("%s: retryable %v, want %v", tt.name, got, tt.retry)
		}
		want := awareness.EINTERNAL
		if tt.unavailable {
			want = awareness.EUNAVAILABLE
		}
		if got := awareness.ErrorCode(s.wrapErr(tt.err)); got != want {
			t.Errorf("%s: code %s, want %s", tt.name, got, want)
		}
	}
}

// A write that fails with a deadlock or a serialization failure runs again, at most
// maxWriteAttempts times, and then maps to UNAVAILABLE; other errors are not retried.
// (The retry loop is the dialect's; it runs here on a SQLite store given PostgreSQL's
// retry rule.)
func TestWriteRetriesConflicts(t *testing.T) {
	s := MustOpenSQLite(t)
	s.d.retryable, s.d.unavailable = pgRetryable, pgUnavailable
	ctx := t.Context()
	tests := []struct {
		name      string
		failures  int
		code      string
		wantRuns  int
		wantError string
	}{
		{"deadlock once", 1, "40P01", 2, ""},
		{"serialization failures", 3, "40001", 4, ""},
		{"deadlock every time", 100, "40P01", maxWriteAttempts, awareness.EUNAVAILABLE},
		{"unique violation", 1, "23505", 1, awareness.EINTERNAL},
	}
	for _, tt := range tests {
		runs := 0
		err := s.write(ctx, "test", func(*tx) error {
			runs++
			if runs <= tt.failures {
				return &pgconn.PgError{Code: tt.code}
			}
			return nil
		})
		if runs != tt.wantRuns {
			t.Errorf("%s: %d runs, want %d", tt.name, runs, tt.wantRuns)
		}
		if got := awareness.ErrorCode(err); err != nil && got != tt.wantError || err == nil && tt.wantError != "" {
			t.Errorf("%s: err %v, want code %q", tt.name, err, tt.wantError)
		}
	}
}
