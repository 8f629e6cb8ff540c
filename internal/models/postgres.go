package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// PostgreSQL pools. Each store has a write pool and a read pool; the Listener adds one
// connection per process. Connections idle for a while are closed, so a quiet process
// holds few.
const (
	pgWriteConns   = 10
	pgReadConns    = 10
	pgIdleConns    = 2
	pgIdleTime     = time.Minute
	pgConnectLimit = 10 * time.Second // connect timeout when the DSN sets none
	pgAppName      = "awareness"      // application_name when the DSN sets none
)

var pgDialect = dialect{
	name:  "postgres",
	goose: goose.DialectPostgres,
	sql:   pgSQL,
	// ReadChanges and Stats read several statements from one snapshot.
	readTx:      &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead},
	unavailable: pgUnavailable,
	retryable:   pgRetryable,
	notify:      true,
	gorm:        func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) },
}

// IsPostgresDSN reports whether db names a PostgreSQL database, a postgres:// or
// postgresql:// URL, rather than a SQLite file.
func IsPostgresDSN(db string) bool {
	l := strings.ToLower(strings.TrimSpace(db))
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// CheckPostgresDSN parses a PostgreSQL URL without connecting. Its errors never
// contain the password.
func CheckPostgresDSN(dsn string) error {
	_, err := parsePostgresDSN(dsn)
	return err
}

// RedactDSN returns db with any password replaced, for logs. Non-URL values (SQLite
// paths) are returned unchanged.
func RedactDSN(db string) string {
	if !IsPostgresDSN(db) {
		return db
	}
	u, err := url.Parse(strings.TrimSpace(db))
	if err != nil {
		return "postgres://(unparsable)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Open opens the store named by db: a PostgreSQL database for a postgres:// or
// postgresql:// URL, otherwise a SQLite file (created if missing). Every command opens
// its database through Open.
func Open(ctx context.Context, db string, opts Options) (*Store, error) {
	if IsPostgresDSN(db) {
		return OpenPostgres(ctx, db, opts)
	}
	return OpenSQLite(ctx, db, opts)
}

func parsePostgresDSN(dsn string) (*pgx.ConnConfig, error) {
	if !IsPostgresDSN(dsn) {
		return nil, errors.New("models: a PostgreSQL DSN is a postgres:// or postgresql:// URL")
	}
	cfg, err := pgx.ParseConfig(strings.TrimSpace(dsn))
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("models: PostgreSQL DSN: %w", err)
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = pgAppName
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectLimit
	}
	return cfg, nil
}

// OpenPostgres connects to the PostgreSQL database named by dsn (a postgres:// URL),
// applies pending migrations under a session advisory lock (several processes may
// start at once) and returns the store. The database must exist. Several processes may
// share one database: sequences are assigned under the head row lock, and a Listener
// in each process delivers the notices the others open.
func OpenPostgres(ctx context.Context, dsn string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := parsePostgresDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Tracer = opts.queryTracer
	pool := func(conns int) *sql.DB {
		db := stdlib.OpenDB(*cfg.Copy())
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(pgIdleConns)
		db.SetConnMaxIdleTime(pgIdleTime)
		return db
	}
	wdb := pool(pgWriteConns)
	if err := wdb.PingContext(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: connect to PostgreSQL %s: %w", pgTarget(cfg), err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	mig, err := newMigrator(pgDialect, wdb, log, goose.WithSessionLocker(locker))
	if err == nil {
		err = migrate(ctx, mig, log)
	}
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	rdb := pool(pgReadConns)
	s, err := newStore(ctx, pgDialect, wdb, rdb, log, opts.Observer)
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	s.pg = cfg
	s.notices = opts.NoticeTool
	hints := opts.Hints
	if hints == "" {
		hints = DefaultHints
	}
	switch {
	case opts.Bus != nil && opts.Hints != "":
		s.Close()
		return nil, fmt.Errorf("models: hint mode %q and a hint bus exclude each other", opts.Hints)
	case opts.Bus != nil:
		s.bus = opts.Bus
	case hints == HintsInCommit:
	case hints == HintsAfterCommit:
		s.hintsAfterCommit = true
	case hints == HintsOff:
		s.d.notify = false
	default:
		s.Close()
		return nil, fmt.Errorf("models: hint mode %q: want %s, %s or %s", opts.Hints, HintsInCommit, HintsAfterCommit, HintsOff)
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	log.Info("state database open", "dialect", "postgres", "target", pgTarget(cfg),
		"write_conns", pgWriteConns, "read_conns", pgReadConns)
	return s, nil
}

// pgTarget describes a connection configuration for logs, without secrets.
func pgTarget(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// pgRetryable reports the errors after which a write transaction is run again:
// serialization failures and deadlocks.
func pgRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// pgUnavailable reports failures that mean "the database cannot serve this now":
// connection exceptions (08xxx), insufficient resources (53xxx), operator
// intervention such as a shutdown or a terminated backend (57P0x), serialization
// failures and deadlocks that outlived the retries (40001, 40P01), and failures to
// reach the server at all (refused, reset, timed out, cut short).
func pgUnavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
			strings.HasPrefix(pe.Code, "57P0") || pe.Code == "40001" || pe.Code == "40P01"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
