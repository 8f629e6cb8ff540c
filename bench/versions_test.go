package bench

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestVersions prints the database versions and durability settings the benchmarks
// ran with, for RESULTS.md. It runs only with BENCH_VERSIONS=1 (bench/run.sh sets it).
func TestVersions(t *testing.T) {
	if os.Getenv("BENCH_VERSIONS") != "1" {
		t.Skip("set BENCH_VERSIONS=1 to print the database versions")
	}
	path := filepath.Join(benchDir(t), "v.db")
	openSQLiteStore(t, path).Close()
	db := openRaw(t, "sqlite3", sqliteURI(path, sqliteWriteParams))
	var v, mode string
	var sync int
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	_ = db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	_ = db.QueryRow("PRAGMA synchronous").Scan(&sync)
	fmt.Printf("sqlite: %s (mattn/go-sqlite3, bundled), journal_mode=%s synchronous=%d\n", v, mode, sync)
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		fmt.Println("postgres: not run (TEST_DATABASE_URL unset)")
		return
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pg := stdlib.OpenDB(*cfg)
	defer pg.Close()
	var version string
	if err := pg.QueryRow("SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	settings := ""
	for _, s := range []string{"synchronous_commit", "fsync", "wal_sync_method", "shared_buffers"} {
		var val sql.NullString
		_ = pg.QueryRow("SHOW " + s).Scan(&val)
		settings += " " + s + "=" + val.String
	}
	fmt.Printf("postgres: %s,%s\n", version, settings)
}
