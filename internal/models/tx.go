package models

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// wtx is one write transaction. The append path runs its statements on it directly with
// database/sql (query, exec, scanRow: `?` placeholders, no reflection); everything else
// goes through gorm(), a GORM session whose connection pool is this transaction.
//
// Why not GORM's prepared statement cache: it prepares a statement first used inside a
// transaction on that transaction, and database/sql prepares it again in the next one,
// so every append transaction paid a prepare per statement. Here a statement is
// prepared once on the write connection (stmtCache) and only bound to each transaction.
type wtx struct {
	ctx   context.Context
	tx    *sql.Tx
	cache *stmtCache
	bound map[string]*sql.Stmt // this transaction's handles on the cached statements
	w     *gorm.DB             // the write pool's GORM handle, for gorm()
	g     *gorm.DB             // set by the first gorm()
}

var _ gorm.ConnPool = (*wtx)(nil)

// beginWrite begins a write transaction under ctx: waiting for the write connection
// and BEGIN end with ctx, and database/sql rolls the transaction back if ctx ends
// before the commit. On SQLite the statements inside it run under
// context.WithoutCancel(ctx): mattn/go-sqlite3 starts a goroutine per statement, and
// one per row read, to interrupt it when a cancellable context ends, which for a
// notifying append to a target of thousands of watchers was thousands of goroutines
// inside the one serial transaction. A statement on the local database is not worth
// interrupting; the transaction is still bounded by ctx (a rollback at the next
// statement or at COMMIT).
func (s *Store) beginWrite(ctx context.Context) (*wtx, error) {
	tx, err := s.wsql.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	sctx := ctx
	if s.d.detachStatements {
		sctx = context.WithoutCancel(ctx)
	}
	return &wtx{ctx: sctx, tx: tx, cache: s.stmts, w: s.w}, nil
}

// gorm returns the transaction's GORM session. It is made on first use: the append
// path runs on database/sql alone, and on SQLite its transactions run one at a time,
// so the session's allocations would lengthen the serial part of every group commit.
func (t *wtx) gorm() *gorm.DB {
	if t.g == nil {
		// What gorm.DB.Begin does, with this transaction as the pool.
		t.g = t.w.Session(&gorm.Session{Context: t.ctx, NewDB: true})
		t.g.Statement.ConnPool = t
	}
	return t.g
}

// stmt returns the transaction's handle on the prepared statement for q (in the
// driver's placeholder syntax), or nil when q is not prepared.
func (t *wtx) stmt(ctx context.Context, q string) *sql.Stmt {
	if st, ok := t.bound[q]; ok {
		return st
	}
	st := t.cache.get(q)
	if st == nil {
		return nil
	}
	st = t.tx.StmtContext(ctx, st)
	if t.bound == nil {
		t.bound = make(map[string]*sql.Stmt)
	}
	t.bound[q] = st
	return st
}

// PrepareContext implements gorm.ConnPool.
func (t *wtx) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, q)
}

// ExecContext implements gorm.ConnPool.
func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st := t.stmt(ctx, q)
	if st == nil {
		return t.tx.ExecContext(ctx, q, args...)
	}
	return st.ExecContext(ctx, args...)
}

// QueryContext implements gorm.ConnPool.
func (t *wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st := t.stmt(ctx, q)
	if st == nil {
		return t.tx.QueryContext(ctx, q, args...)
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext implements gorm.ConnPool.
func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st := t.stmt(ctx, q)
	if st == nil {
		return t.tx.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// query, exec and scanRow run SQL written with `?` placeholders (the SQL of store.go).

func (t *wtx) query(q string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(t.ctx, t.cache.rebind(q), args...)
}

func (t *wtx) exec(q string, args ...any) (int64, error) {
	res, err := t.ExecContext(t.ctx, t.cache.rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// scanRow scans the first row of q into dest; found is false when there is none.
func (t *wtx) scanRow(dest []any, q string, args ...any) (found bool, err error) {
	err = t.QueryRowContext(t.ctx, t.cache.rebind(q), args...).Scan(dest...)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// stmtCache holds the write pool's prepared statements and the placeholder rewrites of
// the store's SQL. On SQLite the append path's statements are prepared once, when the
// store opens, on the pool (one connection), and bound to each transaction; they cannot
// be prepared lazily, since preparing on the pool needs the connection the transaction
// holds. Other statements run unprepared, which on SQLite costs no round trip.
// PostgreSQL prepares nothing here: pgx prepares each statement text once per
// connection; its SQL needs $1, $2, … placeholders instead.
type stmtCache struct {
	stmts  map[string]*sql.Stmt // read-only after newStmtCache
	dollar bool                 // rewrite ? placeholders into $1, $2, …
	texts  sync.Map             // SQL with ? → SQL with $n
}

// newStmtCache prepares qs on db (nil db: none).
func newStmtCache(ctx context.Context, db *sql.DB, dollar bool, qs ...string) (*stmtCache, error) {
	c := &stmtCache{stmts: make(map[string]*sql.Stmt), dollar: dollar}
	if db == nil {
		return c, nil
	}
	for _, q := range qs {
		st, err := db.PrepareContext(ctx, c.rebind(q))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("prepare %q: %w", firstLine(q), err)
		}
		c.stmts[c.rebind(q)] = st
	}
	return c, nil
}

// get returns the pool's statement for q (in the driver's syntax), nil when q is not
// prepared.
func (c *stmtCache) get(q string) *sql.Stmt { return c.stmts[q] }

func (c *stmtCache) close() {
	for _, st := range c.stmts {
		st.Close()
	}
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i]
	}
	return q
}

// rebind returns q in the driver's placeholder syntax. The store's SQL has no `?` in
// string literals.
func (c *stmtCache) rebind(q string) string {
	if !c.dollar {
		return q
	}
	if r, ok := c.texts.Load(q); ok {
		return r.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	r := b.String()
	c.texts.Store(q, r)
	return r
}
