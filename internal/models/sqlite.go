package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mattn/go-sqlite3"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/awareness/awareness/internal/awareness"
)

// Options configures a Store.
type Options struct {
	// Logger receives migration and slow-query logs; nil discards them.
	Logger *slog.Logger
	// Observer is told of every transaction (its name, latency and error) and of
	// acknowledged notices and lost-COMMIT resolutions; nil: nobody.
	Observer awareness.Observer
	// Hints is how a PostgreSQL store sends its cross-process hints by NOTIFY
	// (notify.go); "" is DefaultHints.
	Hints HintMode
	// Bus, when set, carries a PostgreSQL store's hints in place of NOTIFY: each
	// committed transaction's hint is published on it after the commit. Hints must
	// then be "". A SQLite store refuses one (a single process needs no hints).
	Bus HintBus

	// queryTracer, for tests, sees every statement of a PostgreSQL store's pools and
	// of its Listener's connection.
	queryTracer pgx.QueryTracer
	// NoticeTool is the reconcile tool every notice's text names (NTC-1); "" is
	// awareness.DefaultNoticeTool.
	NoticeTool awareness.NoticeTool
}

// Connection pragmas of the SQLite store. Every connection gets foreign keys and a busy
// timeout. The write pool (one connection) also sets WAL, synchronous=FULL (a commit is
// durable before Append returns, SIG-7) and _txlock=immediate, so a write transaction
// takes the database write lock at BEGIN and never fails half way on a lock upgrade.
// The read pool opens deferred, query-only transactions: in WAL mode readers never block
// the writer and each read transaction sees one snapshot. Checkpoints are SQLite's own
// (the commit that crosses 1,000 log pages copies them into the database file); the
// write connection's journal_size_limit trims the log file after a checkpoint that
// readers held back let it grow. (A checkpointer of our own beside the writer was
// measured against this in six interleaved rounds and won nothing beyond the spread.)
const (
	sqliteWriteParams = "_journal_mode=WAL&_foreign_keys=on&_busy_timeout=10000&_synchronous=FULL&_txlock=immediate"
	sqliteReadParams  = "_foreign_keys=on&_busy_timeout=10000&_txlock=deferred&_query_only=on"
	// sqliteJournalSizeLimit is the size the log file is trimmed to after a checkpoint.
	sqliteJournalSizeLimit = "PRAGMA journal_size_limit=67108864" // 64 MiB
)

var sqliteDialect = dialect{
	name:        "sqlite",
	goose:       goose.DialectSQLite3,
	sql:         sqliteSQL,
	readTx:      &sql.TxOptions{ReadOnly: true},
	unavailable: sqliteUnavailable,
	gorm:        func(db *sql.DB) gorm.Dialector { return sqlite.New(sqlite.Config{Conn: db}) },
	prepare:     true,

	detachStatements: true,
	pinWrite:         true,
}

// OpenSQLite opens (creating if needed) the SQLite database at path, applies pending
// migrations and returns the store. path must name a file: ":memory:" is refused because
// the read and write pools would see different databases.
func OpenSQLite(ctx context.Context, path string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if path == "" || path == ":memory:" || filepath.Base(path) == ":memory:" {
		return nil, errors.New("models: OpenSQLite needs a database file path")
	}
	if opts.Bus != nil {
		return nil, errors.New("models: a hint bus needs a PostgreSQL database (SQLite serves one process)")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("models: resolve database path: %w", err)
	}
	uri := "file:" + (&url.URL{Path: abs}).EscapedPath()

	wdb := sql.OpenDB(newSQLiteConnector(uri+"?"+sqliteWriteParams, sqliteJournalSizeLimit))
	// One writer connection: writers queue in the pool rather than on SQLITE_BUSY.
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := wdb.PingContext(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: open database: %w", err)
	}
	mig, err := newMigrator(sqliteDialect, wdb, log)
	if err == nil {
		err = migrate(ctx, mig, log)
	}
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: %w", err)
	}

	rdb, err := sql.Open(sqlite.DriverName, uri+"?"+sqliteReadParams)
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("models: open database: %w", err)
	}
	conns := max(4, runtime.GOMAXPROCS(0))
	rdb.SetMaxOpenConns(conns)
	rdb.SetMaxIdleConns(conns)
	rdb.SetConnMaxIdleTime(5 * time.Minute)

	s, err := newStore(ctx, sqliteDialect, wdb, rdb, log, opts.Observer)
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	s.notices = opts.NoticeTool
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	log.Info("state database open", "dialect", "sqlite", "path", abs, "read_conns", conns)
	return s, nil
}

// GORM's cache of prepared statements on SQLite's single reads is bounded by count, not
// by age: preparedReads statements per pool (the texts vary with the length of an IN
// list), least recently used first out. preparedNoExpiry is the TTL GORM takes for "no
// expiry" (ten years), with which its cache starts no expiry goroutine; its default
// (a day) starts one that never ends. The goroutine-leak checks of the tests that open
// a store fail if a GORM release changes that.
const (
	preparedReads    = 512
	preparedNoExpiry = 24 * 365 * 10 * time.Hour
)

// openGorm wraps an open pool with the project's GORM discipline: no implicit
// transactions, prepared statements (GORM's cache on SQLite's single reads, the
// store's statement caches for the hot statements, pgx's own on PostgreSQL),
// translated errors, slog for failed and slow statements.
func openGorm(d dialect, db *sql.DB, log *slog.Logger) (*gorm.DB, error) {
	return gorm.Open(d.gorm(db), &gorm.Config{
		SkipDefaultTransaction: true,
		PrepareStmt:            d.prepare,
		PrepareStmtMaxSize:     preparedReads,
		PrepareStmtTTL:         preparedNoExpiry,
		TranslateError:         true,
		Logger: quietLogger{logger.NewSlogLogger(log, logger.Config{
			SlowThreshold:             slowStatement,
			LogLevel:                  logger.Warn,
			IgnoreRecordNotFoundError: true,
			ParameterizedQueries:      true,
		})},
	})
}

// slowStatement is the latency above which a statement is logged.
const slowStatement = 200 * time.Millisecond

// quietLogger passes GORM's trace of a statement on only when the statement failed or
// was slow, the only ones logged at logger.Warn: GORM's slog logger renders every
// statement's SQL before it decides, which cost more than building the statement.
type quietLogger struct{ logger.Interface }

// LogMode implements logger.Interface.
func (l quietLogger) LogMode(level logger.LogLevel) logger.Interface {
	return quietLogger{l.Interface.LogMode(level)}
}

// Trace implements logger.Interface.
func (l quietLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	if err == nil && time.Since(begin) <= slowStatement {
		return
	}
	l.Interface.Trace(ctx, begin, fc, err)
}

// sqliteConnector opens mattn/go-sqlite3 connections of one DSN with a hook run on each
// new connection (sql.OpenDB: no driver registered under a global name).
type sqliteConnector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func newSQLiteConnector(dsn string, pragmas ...string) *sqliteConnector {
	return &sqliteConnector{dsn: dsn, drv: &sqlite3.SQLiteDriver{ConnectHook: func(conn *sqlite3.SQLiteConn) error {
		for _, p := range pragmas {
			if _, err := conn.Exec(p, nil); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}}}
}

func (c *sqliteConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }

func (c *sqliteConnector) Driver() driver.Driver { return c.drv }

// pinnedConn is the SQLite store's write connection, taken from the write pool and
// held by the store. Every write transaction runs on it with explicit BEGIN IMMEDIATE,
// COMMIT and ROLLBACK statements (beginPinned) rather than database/sql's BeginTx,
// which starts a goroutine per transaction to watch its context; the write pool's
// cached statements are prepared on it once. One transaction holds it at a time (sem).
// A transaction that ends in any other way than a COMMIT that succeeded ends in
// abort, which leaves the connection outside any transaction or drops it; a dropped
// connection is taken again, with its statements prepared again, by the next
// transaction.
type pinnedConn struct {
	sem   chan struct{} // held by the transaction on the connection
	db    *sql.DB       // the write pool (one connection)
	g     *gorm.DB      // renders the statements
	qs    []string      // the statements to prepare
	conn  *sql.Conn     // nil until taken, and after it was dropped
	stmts *stmtCache    // prepared on conn
	done  bool          // closed
}

// pinnedStatements are the transaction control statements of the pinned connection,
// prepared with the others.
var pinnedStatements = []string{"BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"}

func newPinnedConn(g *gorm.DB, db *sql.DB, qs []string) *pinnedConn {
	return &pinnedConn{sem: make(chan struct{}, 1), db: db, g: g, qs: append(qs, pinnedStatements...)}
}

// acquire waits, until ctx ends, for the connection, and takes it from the pool when
// the store holds none.
func (p *pinnedConn) acquire(ctx context.Context) (*sql.Conn, *stmtCache, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		p.release()
		return nil, nil, err
	}
	if p.done {
		p.release()
		return nil, nil, errClosed
	}
	if p.conn == nil {
		if err := p.take(ctx); err != nil {
			p.release()
			return nil, nil, err
		}
	}
	return p.conn, p.stmts, nil
}

func (p *pinnedConn) release() { <-p.sem }

// take takes the connection from the pool and prepares the statements on it.
func (p *pinnedConn) take(ctx context.Context) error {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	stmts, err := newStmtCache(context.WithoutCancel(ctx), p.g, conn, true, p.qs...)
	if err != nil {
		conn.Close()
		return err
	}
	p.conn, p.stmts = conn, stmts
	return nil
}

// drop closes the statements and gives the connection back to the pool, or, when bad,
// has the pool close it.
func (p *pinnedConn) drop(bad bool) {
	if p.conn == nil {
		return
	}
	p.stmts.close()
	if bad {
		p.conn.Raw(func(any) error { return driver.ErrBadConn })
	} else {
		p.conn.Close()
	}
	p.conn, p.stmts = nil, nil
}

// exec runs one of pinnedStatements.
func (p *pinnedConn) exec(ctx context.Context, q string) error {
	_, err := p.stmts.texts[q].stmt.ExecContext(ctx)
	return err
}

// abort rolls back the open transaction, if any. When ROLLBACK fails (SQLite ends
// the transaction itself after some failures, and then has none to roll back), it
// asks the connection whether a transaction is still open, and drops the connection
// when one is or when it cannot tell: the pinned connection is never left inside a
// transaction.
func (p *pinnedConn) abort(ctx context.Context) error {
	err := p.exec(ctx, "ROLLBACK")
	if err == nil {
		return nil
	}
	open := true
	rerr := p.conn.Raw(func(dc any) error {
		if c, ok := dc.(*sqlite3.SQLiteConn); ok {
			open = !c.AutoCommit()
		}
		return nil
	})
	if rerr == nil && !open {
		return nil
	}
	p.drop(true)
	return err
}

// ping checks the connection, waiting for it until ctx ends.
func (p *pinnedConn) ping(ctx context.Context) error {
	conn, _, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer p.release()
	return conn.PingContext(context.WithoutCancel(ctx))
}

// close waits for the transaction on the connection to end, then gives the
// connection back to the pool; every later acquire fails with errClosed.
func (p *pinnedConn) close() {
	p.sem <- struct{}{}
	p.done = true
	p.drop(false)
	p.release()
}
