package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// tx runs the store's SQL: every statement of the package goes through its methods
// (query, exec, scanRow; scanAll with a row scanner of rows.go). It is a write
// transaction (beginWrite), a read transaction that sees one snapshot (beginRead), or
// a pool itself for statements that need no transaction (onPool: the single reads of
// reader, and on PostgreSQL the hint sent after a commit and the question about a lost
// commit).
//
// The store's SQL is written with `?` placeholders; GORM binds them in the dialect's
// syntax ($1, $2, … on PostgreSQL) and expands a slice argument (`IN ?`). That is the
// one placeholder rule. A statement listed for a pool's statement cache (stmtCache) is
// rendered by GORM once, when the store opens, and run as that text, prepared on
// SQLite, its arguments passed to the driver as they are (so an array argument binds
// as an array); every other statement is built by GORM on each run.
type tx struct {
	ctx  context.Context
	pool *gorm.DB // the pool's GORM handle
	g    *gorm.DB // the GORM session of the statements, made by the first gorm()
	// conn runs the statements: sqlTx, or the pinned write connection; nil for a tx
	// on the pool (onPool).
	conn  gorm.ConnPool
	sqlTx *sql.Tx // a transaction of database/sql; nil on the pinned connection
	// pin is the pinned write connection the transaction holds (SQLite), until commit
	// or rollback; end is the context that bounds the transaction there.
	pin   *pinnedConn
	end   context.Context
	stmts *stmtCache // the cached statements; nil for a tx on the pool
	bound map[*sql.Stmt]*sql.Stmt
	// xid is the transaction's id when a statement returned it (dialectSQL.returnMore);
	// 0 otherwise.
	xid int64
	// count, when set (tests), counts the statements run through query and exec.
	count *stmtCount
}

// beginWrite begins a write transaction under ctx: waiting for the write connection
// and BEGIN end with ctx, and the transaction rolls back if ctx ends before the
// commit. On SQLite it runs on the pinned write connection (beginPinned). There the
// statements inside it run under
// context.WithoutCancel(ctx): mattn/go-sqlite3 starts a goroutine per statement, and
// one per row read, to interrupt it when a cancellable context ends, which for a
// notifying append to a target of thousands of watchers was thousands of goroutines
// inside the one serial transaction. A statement on the local database is not worth
// interrupting; the transaction is still bounded by ctx (a rollback at the next
// statement or at COMMIT).
func (s *Store) beginWrite(ctx context.Context) (*tx, error) {
	if s.pin != nil {
		return s.beginPinned(ctx)
	}
	sctx := ctx
	if s.d.detachStatements {
		sctx = context.WithoutCancel(ctx)
	}
	t, err := begin(ctx, sctx, s.w, s.wsql, nil, s.wstmts)
	if err == nil {
		t.count = s.count
	}
	return t, err
}

// beginRead begins a read transaction on the read pool that sees one snapshot
// (dialect.readTx). On SQLite its statements, like a write transaction's, run under
// context.WithoutCancel(ctx): mattn/go-sqlite3 would otherwise start a goroutine for
// every row read (a reconciliation page of 200 events read 200 goroutines). The read
// still ends with ctx: database/sql closes a transaction's rows when the context the
// transaction began under ends, at the next row.
func (s *Store) beginRead(ctx context.Context) (*tx, error) {
	sctx := ctx
	if s.d.detachStatements {
		sctx = context.WithoutCancel(ctx)
	}
	return begin(ctx, sctx, s.r, s.rsql, s.d.readTx, s.rstmts)
}

// begin is what gorm.DB.Begin does, keeping the *sql.Tx for the cached statements:
// BEGIN under ctx, and a GORM session under sctx whose connection pool is the
// transaction.
func begin(ctx, sctx context.Context, g *gorm.DB, db *sql.DB, opts *sql.TxOptions, stmts *stmtCache) (*tx, error) {
	sqlTx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{ctx: sctx, pool: g, conn: sqlTx, sqlTx: sqlTx, stmts: stmts}, nil
}

// beginPinned begins a write transaction on the pinned write connection (SQLite):
// BEGIN IMMEDIATE once the connection is free, its statements under
// context.WithoutCancel(ctx), so that neither database/sql nor the driver starts a
// goroutine for it. ctx bounds the wait for the connection; once it ends, the next
// statement and the commit fail with its error and the transaction rolls back. The
// wait for another process's write lock is bounded by busy_timeout.
func (s *Store) beginPinned(ctx context.Context) (*tx, error) {
	conn, stmts, err := s.pin.acquire(ctx)
	if err != nil {
		return nil, err
	}
	sctx := context.WithoutCancel(ctx)
	if err := s.pin.exec(sctx, "BEGIN IMMEDIATE"); err != nil {
		s.pin.abort(sctx)
		s.pin.release()
		return nil, err
	}
	return &tx{ctx: sctx, end: ctx, pool: s.w, conn: conn, pin: s.pin, stmts: stmts, count: s.count}, nil
}

// gorm returns the GORM session the tx's statements are built on. A transaction's is
// made on first use: an append and a reconciliation read run cached statements only,
// and on SQLite appends run one at a time, so the session's allocations would lengthen
// the serial part of every group commit.
func (t *tx) gorm() *gorm.DB {
	if t.g == nil {
		t.g = t.pool.Session(&gorm.Session{Context: t.ctx, NewDB: true})
		if t.conn != nil {
			t.g.Statement.ConnPool = t.conn
		}
	}
	return t.g
}

// reader returns a tx on the read pool for reads of one statement, which need no
// snapshot. Its statements run through GORM's own statement cache (PrepareStmt on
// SQLite).
func (s *Store) reader(ctx context.Context) *tx { return onPool(ctx, s.r) }

// onPool returns a tx that runs each statement on its own on g's pool, outside any
// transaction.
func onPool(ctx context.Context, g *gorm.DB) *tx { return &tx{ctx: ctx, pool: g} }

// onPoolQuiet is onPool for statements whose failures the caller handles and logs
// itself (a hint after commit, the question about a lost commit asked while the server
// is away): GORM does not log them too.
func onPoolQuiet(ctx context.Context, g *gorm.DB) *tx {
	return onPool(ctx, g.Session(&gorm.Session{Logger: logger.Discard}))
}

// rollback ends the transaction without committing (a read transaction has nothing to
// commit). On the pinned connection it releases the connection; after that it does
// nothing.
func (t *tx) rollback() error {
	if t.sqlTx != nil {
		return t.sqlTx.Rollback()
	}
	if t.pin == nil {
		return nil
	}
	defer t.releasePin()
	return t.pin.abort(t.ctx)
}

// commit commits the transaction. On the pinned connection a transaction whose
// context ended, or whose COMMIT failed, is rolled back, and the connection released.
func (t *tx) commit() error {
	if t.sqlTx != nil {
		return t.sqlTx.Commit()
	}
	defer t.releasePin()
	if err := t.end.Err(); err != nil {
		t.pin.abort(t.ctx)
		return err
	}
	if err := t.pin.exec(t.ctx, "COMMIT"); err != nil {
		t.pin.abort(t.ctx)
		return err
	}
	return nil
}

func (t *tx) releasePin() {
	t.pin.release()
	t.pin, t.conn, t.stmts, t.g = nil, nil, nil, nil
}

// ended is the error of a statement run after the pinned transaction's context ended.
func (t *tx) ended() error {
	if t.end == nil {
		return nil
	}
	if t.pin == nil {
		return sql.ErrTxDone
	}
	return t.end.Err()
}

// stmtCount counts the statements of write transactions (tests): all of them, and
// those built by GORM on each run.
type stmtCount struct{ all, built atomic.Int64 }

// maxCachedStmts bounds the statements a cache adds as they are first run
// (tx.cached).
const maxCachedStmts = 256

// cached returns the transaction's handle on the cached statement q: its text in the
// dialect's syntax, and the statement bound to this transaction when it is prepared.
// A statement not cached yet is rendered (and on the pinned write connection
// prepared) when first run and kept, up to maxCachedStmts, in the pinned
// connection's cache and in a lazy one (PostgreSQL's write pool), unless an argument
// is a slice, which GORM expands into one placeholder per element.
func (t *tx) cached(q string, args []any) (text string, st *sql.Stmt, ok bool) {
	if t.stmts == nil {
		return "", nil, false
	}
	c, ok := t.stmts.texts[q]
	if !ok && !expands(args) {
		switch {
		case t.pin != nil && len(t.stmts.texts) < maxCachedStmts:
			var err error
			if c, err = t.stmts.add(t.ctx, t.pool, t.conn, true, q, len(args)); err == nil {
				ok = true
			}
		case t.stmts.lazy:
			c, ok = t.stmts.lazyText(t.pool, q, len(args))
		}
	}
	if !ok || c.stmt == nil || t.sqlTx == nil {
		return c.text, c.stmt, ok
	}
	if st, bound := t.bound[c.stmt]; bound {
		return c.text, st, true
	}
	st = t.sqlTx.StmtContext(t.ctx, c.stmt)
	if t.bound == nil {
		t.bound = make(map[*sql.Stmt]*sql.Stmt)
	}
	t.bound[c.stmt] = st
	return c.text, st, true
}

// query runs q and returns its rows.
func (t *tx) query(q string, args ...any) (*sql.Rows, error) {
	if err := t.ended(); err != nil {
		return nil, err
	}
	if t.count != nil {
		t.count.all.Add(1)
	}
	if text, st, ok := t.cached(q, args); ok {
		if st != nil {
			return st.QueryContext(t.ctx, args...)
		}
		return t.conn.QueryContext(t.ctx, text, args...)
	}
	if t.count != nil {
		t.count.built.Add(1)
	}
	return t.gorm().Raw(q, args...).Rows()
}

// exec runs q and returns the number of rows it affected.
func (t *tx) exec(q string, args ...any) (int64, error) {
	if err := t.ended(); err != nil {
		return 0, err
	}
	if t.count != nil {
		t.count.all.Add(1)
	}
	if text, st, ok := t.cached(q, args); ok {
		var (
			res sql.Result
			err error
		)
		if st != nil {
			res, err = st.ExecContext(t.ctx, args...)
		} else {
			res, err = t.conn.ExecContext(t.ctx, text, args...)
		}
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	if t.count != nil {
		t.count.built.Add(1)
	}
	res := t.gorm().Exec(q, args...)
	return res.RowsAffected, res.Error
}

// scanRow runs q and scans its first row into dest; found is false when there is none.
// (database/sql's QueryRow is avoided: with prepared statements it hides prepare errors
// behind an empty *sql.Row.)
func (t *tx) scanRow(dest []any, q string, args ...any) (found bool, err error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(dest...); err != nil {
		return false, err
	}
	return true, rows.Close()
}

// scanAll runs q and reads every row with scan, closing the rows. It never returns a
// nil slice without an error.
func scanAll[T any](t *tx, scan func(*sql.Rows) (T, error), q string, args ...any) ([]T, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scan)
}

// collect reads every row of rows with scan and closes them.
func collect[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, rows.Close()
}

// stmtCache holds a pool's hot statements: each one's text in the dialect's syntax,
// rendered once by GORM, and on SQLite its prepared statement. SQLite's are prepared
// when the store opens, on the pool, and bound to each transaction that runs them
// (tx.cached), so the driver prepares each once per connection; they cannot be
// prepared lazily on the write pool, since preparing there needs the one connection
// the transaction holds. PostgreSQL prepares nothing here: pgx prepares each statement
// text once per connection and reuses it.
//
// Why not GORM's PrepareStmt: it prepares a statement first used inside a transaction
// on that transaction, and database/sql prepares it again in the next one, so every
// transaction would pay a prepare per statement.
type stmtCache struct {
	// texts are by the store's text: read-only after newStmtCache, but for the pinned
	// write connection's, which its transactions add to (tx.cached).
	texts map[string]cachedStmt
	// lazy: texts not listed when the cache was made are rendered on first use and
	// kept in more (a cache shared by concurrent transactions that prepares nothing).
	lazy  bool
	more  sync.Map // string → cachedStmt
	nmore atomic.Int32
}

// lazyText returns the text of q, a statement of n arguments, rendering it with g's
// dialector when first asked; ok is false once the cache holds maxCachedStmts more.
func (c *stmtCache) lazyText(g *gorm.DB, q string, n int) (cachedStmt, bool) {
	if e, ok := c.more.Load(q); ok {
		return e.(cachedStmt), true
	}
	if c.nmore.Load() >= maxCachedStmts {
		return cachedStmt{}, false
	}
	r := g.Session(&gorm.Session{DryRun: true, NewDB: true}).Raw(q, make([]any, n)...)
	if r.Error != nil {
		return cachedStmt{}, false
	}
	e := cachedStmt{text: r.Statement.SQL.String()}
	if _, loaded := c.more.LoadOrStore(q, e); !loaded {
		c.nmore.Add(1)
	}
	return e, true
}

type cachedStmt struct {
	text string    // in the dialect's syntax
	stmt *sql.Stmt // prepared on the pool; nil when the dialect prepares nothing here
}

// preparer is a pool or a connection that prepares statements.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// newStmtCache renders qs with g's dialector and, when prepare is set, prepares them on
// db.
func newStmtCache(ctx context.Context, g *gorm.DB, db preparer, prepare bool, qs ...string) (*stmtCache, error) {
	c := &stmtCache{texts: make(map[string]cachedStmt, len(qs))}
	for _, q := range qs {
		if _, dup := c.texts[q]; dup || q == "" {
			continue
		}
		if _, err := c.add(ctx, g, db, prepare, q, strings.Count(q, "?")); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// add renders q, a statement of n arguments, with g's dialector, prepares it on db
// when prepare is set, and keeps it.
func (c *stmtCache) add(ctx context.Context, g *gorm.DB, db preparer, prepare bool, q string, n int) (cachedStmt, error) {
	r := g.Session(&gorm.Session{DryRun: true, NewDB: true}).Raw(q, make([]any, n)...)
	if r.Error != nil {
		return cachedStmt{}, fmt.Errorf("render %q: %w", firstLine(q), r.Error)
	}
	e := cachedStmt{text: r.Statement.SQL.String()}
	if prepare {
		st, err := db.PrepareContext(ctx, e.text)
		if err != nil {
			return cachedStmt{}, fmt.Errorf("prepare %q: %w", firstLine(q), err)
		}
		e.stmt = st
	}
	c.texts[q] = e
	return e, nil
}

// expands reports whether GORM would expand one of args into several placeholders.
func expands(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case nil, string, int, int64, bool, []byte:
			continue
		}
		if k := reflect.ValueOf(a).Kind(); k == reflect.Slice || k == reflect.Array {
			return true
		}
	}
	return false
}

func (c *stmtCache) close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, e := range c.texts {
		if e.stmt != nil {
			errs = append(errs, e.stmt.Close())
		}
	}
	return errors.Join(errs...)
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i]
	}
	return q
}
