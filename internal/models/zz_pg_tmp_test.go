package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/modeltest"
	"github.com/awareness/awareness/internal/models/storetest"
)

var pgDialect = dialect{
	name: "postgres", goose: goose.DialectPostgres, forUpdate: " FOR UPDATE",
	readTx: &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
	unavailable: func(err error) bool {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") || pe.Code == "40001" || pe.Code == "40P01"
		}
		return false
	},
	gorm: func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) },
}

var pgN atomic.Int64

const pgBase = "host=127.0.0.1 port=55439 user=postgres sslmode=disable"

func newPGDatabase(t *testing.T) string {
	admin, err := sql.Open("pgx", pgBase+" dbname=postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("t_%d", pgN.Add(1))
	if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return pgBase + " dbname=" + name
}

func openPG(dsn string) (*Store, error) {
	log := slog.New(slog.DiscardHandler)
	wdb, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(4)
	mig, err := newMigrator(pgDialect, wdb, log)
	if err != nil {
		return nil, err
	}
	if err := migrate(context.Background(), mig, log); err != nil {
		return nil, err
	}
	rdb, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	rdb.SetMaxOpenConns(2)
	return newStore(pgDialect, wdb, rdb, log)
}

func TestTmpPGConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) awareness.Store {
		s, err := openPG(newPGDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestTmpPGModel(t *testing.T) {
	modeltest.Run(t, func(t *testing.T) modeltest.Database {
		dsn := newPGDatabase(t)
		return func() (awareness.Store, error) { return openPG(dsn) }
	})
}
