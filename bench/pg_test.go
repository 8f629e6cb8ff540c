package bench

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/awareness/awareness/internal/models"
)

// PostgreSQL runs when TEST_DATABASE_URL names a database the benchmarks may empty (a
// fresh one: every table but goose's and meta is truncated before each benchmark).
func init() {
	if dsn := os.Getenv("TEST_DATABASE_URL"); dsn != "" {
		backends = append(backends, backend{name: "postgres", fresh: func(tb testing.TB) dbHandle { return freshPostgres(tb, dsn) }})
	}
}

func freshPostgres(tb testing.TB, dsn string) dbHandle {
	tb.Helper()
	s := openPGStore(tb, dsn) // applies the migrations
	s.Close()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	pool := func(tb testing.TB, conns int) *sql.DB {
		db := stdlib.OpenDB(*cfg.Copy())
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		tb.Cleanup(func() { db.Close() })
		return db
	}
	truncateAll(tb, pool(tb, 1))
	return dbHandle{
		store:    func(tb testing.TB) *models.Store { return openPGStore(tb, dsn) },
		rawWrite: func(tb testing.TB) *sql.DB { return pool(tb, 10) },
		rawRead:  func(tb testing.TB) *sql.DB { return pool(tb, 10) },
		rebind:   rebindDollar,
	}
}

func openPGStore(tb testing.TB, dsn string) *models.Store {
	tb.Helper()
	s, err := models.OpenPostgres(context.Background(), dsn, models.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// truncateAll empties every table of the schema but the migration bookkeeping.
func truncateAll(tb testing.TB, db *sql.DB) {
	tb.Helper()
	rows, err := db.Query(`SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
AND tablename NOT IN ('goose_db_version', 'meta')`)
	if err != nil {
		tb.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			tb.Fatal(err)
		}
		tables = append(tables, `"`+t+`"`)
	}
	rows.Close()
	if len(tables) == 0 {
		return
	}
	if _, err := db.Exec("TRUNCATE " + strings.Join(tables, ", ") + " CASCADE"); err != nil {
		tb.Fatal(err)
	}
}
