// Package models is the storage adapter of the service: GORM rows, versioned SQL
// migrations, and Store, which implements awareness.Store, with the core's
// RegistryStore and UpstreamStore, on SQLite, the embedded default, and on
// PostgreSQL, for several processes sharing one database. Open picks the backend from
// the --db value: a postgres:// or postgresql:// URL opens PostgreSQL, anything else a
// SQLite file. The rules live in internal/awareness; this package makes them atomic
// and durable.
//
// # Dialects
//
// One Store type serves both databases; dialect holds what differs: row locks, FOR
// UPDATE on PostgreSQL, while SQLite's write transactions begin IMMEDIATE and so
// already hold the database write lock; the isolation of consistent reads, REPEATABLE
// READ on PostgreSQL; which errors are UNAVAILABLE and which rerun a transaction; and
// whether a transaction sends a cross-process hint. A statement whose text differs
// between the two is one field of dialectSQL, both texts side by side. The shared SQL
// uses ? placeholders, INSERT … ON CONFLICT … RETURNING and no dialect-specific types.
// Times are stored as INTEGER unix nanoseconds UTC, so a round trip is exact: a
// notice's opening time is part of its identity. SQLite, through mattn/go-sqlite3,
// runs in WAL mode with synchronous=FULL and foreign keys, on a write pool of one
// connection and a read pool of query-only connections; checkpoints are SQLite's own,
// with journal_size_limit bounding the log file. PostgreSQL, through pgx, has a write
// pool and a read pool.
//
// # Migrations
//
// The schema is created and changed only by the embedded goose migrations of each
// dialect, migrations/sqlite and migrations/postgres, with the same versions and
// equivalent schemas; never by AutoMigrate. Opening a store applies what is pending;
// on PostgreSQL it does so under a session advisory lock, since several processes may
// start at once. Store.Ping fails while a migration this binary knows is not applied.
//
// # Transactions
//
// Every statement runs through one type, tx: a write transaction on the write pool, a
// read transaction that sees one snapshot on the read pool for ReadChanges,
// ReadStatus, Stats and Activity, or a pool itself for a single statement. Its SQL is
// written with ? placeholders that GORM binds for the dialect, the one placeholder
// rule; rows are read by typed scanners beside their column lists. The hot statements
// of the append path and the reconciliation read are in a statement cache per pool:
// rendered by GORM once when the store opens and, on SQLite, prepared once. On
// PostgreSQL a write that failed with a deadlock or a serialization failure runs
// again, at most five times in all, then answers UNAVAILABLE; a COMMIT whose answer is
// lost is resolved with txid_status on a fresh connection, so a write is never
// reported failed when it committed (ERR-2). Driver errors are mapped to
// *awareness.Error without SQL text. A write that opens or closes notices or records
// events sends one hint, never before its commit: a NOTIFY inside the transaction or
// right after it, or messages on a HintBus. Each process's Listener receives the
// hints, on a bus only those of its interest, and publishes to its hub what its own
// subscribers wait for.
//
// # Where the rules of an append live
//
// Store.Append applies the awareness.AppendOps of one group commit in one write
// transaction, in order; either all commit or none, and on failure every op's results
// are zeroed so that no notice of a rolled-back append is published.
//
//   - Validation (KEY-4, SIG-2, SIG-5): in the core, awareness.ValidateRecord, before the
//     store is called; Append only refuses ops ValidateRecord could not have produced.
//   - Dedupe (SIG-4): here; the head is locked, created at version 0 if absent, before
//     the dedupe key is looked up, so two first appends with one key serialise.
//   - Sequences (SIG-3): here; the head row's upsert (on SQLite an update, or the
//     insert of a new head) increments state_version and returns the new sequence,
//     under the head's row lock.
//   - Cursors (WAT-2, NTC-2, WAT-4): the transitions are the core's pure functions.
//     child_spawned applies awareness.SeedCursor to each producer-passed watcher; a
//     notifying kind is awareness.ApplyMaterial over the target's cursors: M is derived
//     from the head, recorded there by the head bump itself (headUpdateMaterialSQL,
//     headBumpMaterialSQL), and one statement, openNoticesSQL, opens the notices of the
//     synced cursors; then ApplyMaterial goes to the producer-passed watchers one by
//     one; log-only kinds touch none (NTC-4).
//   - Compaction count (REG-3): in the core, AppendOp.Compactions, set by
//     awareness.NewAppendOp from the kind's row; the head upsert adds it.
//   - Keys are parsed once, in the core: NewEvent carries the session's kind, the
//     actor's session and the producer-passed watchers as refs, so the store parses
//     nothing on the append path.
//   - The registry merge of UpsertSessions (REG-1, REG-2) is the core's pure
//     awareness.MergeSessionWrite; the store reads the rows under the head lock, merges
//     with it and writes the result back. Outside the append, Ack applies
//     awareness.AckNamed for the exact form or AckCursor, Watch WatchCursor, and Sweep
//     awareness.SweepCursor to the cursors with M > N == L, never to a pending cursor:
//     on SQLite through the partial index cursors_unopened (migration 00005), on
//     PostgreSQL by a scan of the table (migration 00009 dropped the index).
//
// Lock order inside a write transaction: session heads, then events, then cursors; a
// PostgreSQL batch over several sessions locks all its heads in agent, key order, then
// their cursors in primary-key order, the order Ack and Sweep use; see Store.
//
// # Conformance suites
//
// Behaviour is tested against real databases, not mocks: storetest is the conformance
// suite of awareness.Store, whose RunAll, the one entry point per backend, runs Run,
// RunSweep, RunRegistry, RunActivity and RunUpstream in subtests named after
// requirement ids; modeltest is the model-based property test of the watcher and
// notice protocol. This package's tests run both on each backend, and the core's
// in-memory store in internal/awareness/memstore_test.go runs them too, which proves
// that the rules are the core's; pgtest gives every PostgreSQL test a fresh database
// on the server named by TEST_DATABASE_URL.
package models
