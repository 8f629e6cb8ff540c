// Package pgtest gives tests a fresh PostgreSQL database each: the server is named by
// TEST_DATABASE_URL (an admin URL such as
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). When it is not set,
// tests skip saying so, and fail under CI (internal/testenv).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/testenv"
)

// EnvVar names the admin URL of the test server.
const EnvVar = "TEST_DATABASE_URL"

var seq atomic.Int64

// AdminURL returns TEST_DATABASE_URL; when it is not set the test skips, saying so
// (and fails under CI: testenv.Missing).
func AdminURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		testenv.Missing(tb, "PostgreSQL suite", EnvVar+" is not set: run a PostgreSQL server and set e.g. "+EnvVar+
			"=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (each test gets a fresh database)")
	}
	return u
}

// NewDatabase creates an empty database with a unique name on the TEST_DATABASE_URL
// server, drops it (with FORCE) when the test ends, and returns its URL. It skips when
// TEST_DATABASE_URL is not set and fails when the server does not answer.
//
// The database has synchronous_commit off: a commit returns before its WAL reaches the
// disk, which changes nothing about locking, visibility or notifications (what the
// tests check) but keeps a slow disk's fsync out of every commit. Crash durability is
// PostgreSQL's; NewDurableDatabase keeps the server's setting, for measurements.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, false)
}

// NewDurableDatabase is NewDatabase with the server's own synchronous_commit.
func NewDurableDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, true)
}

func newDatabase(tb testing.TB, durable bool) string {
	tb.Helper()
	admin := AdminURL(tb)
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("%s: %v", EnvVar, err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("awareness_test_%d_%d_%s", os.Getpid(), seq.Add(1), hex.EncodeToString(r[:]))
	if err := Exec(admin, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() {
		if err := Exec(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop test database %s: %v", name, err)
		}
	})
	if !durable {
		if err := Exec(admin, "ALTER DATABASE "+name+" SET synchronous_commit = off"); err != nil {
			tb.Fatalf("configure test database: %v", err)
		}
	}
	u.Path = "/" + name
	return u.String()
}

// Exec runs one statement on the database at dsn, on a connection of its own.
func Exec(dsn, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}
