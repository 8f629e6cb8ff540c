package models

// dialectSQL holds the statements of the store whose text differs between SQLite and
// PostgreSQL, one field per statement, documented once here; sqliteSQL and pgSQL below
// give each dialect's text, "" where a dialect needs no such statement. (River's drivers
// hold their SQL the same way: each driver has its own text for every named query, and
// a driver may answer one in more statements than another.) The rest of the store's
// SQL is written once for both: `?` placeholders (see tx), INSERT … ON CONFLICT …
// RETURNING, DELETE … RETURNING, no scalar MAX/GREATEST, no dialect-specific types.
type dialectSQL struct {
	// forUpdate ends a SELECT that reads rows to decide how to rewrite them in the same
	// transaction (" FOR UPDATE" on PostgreSQL). SQLite needs none: its write
	// transactions begin IMMEDIATE and so already hold the database write lock. It is
	// also what turns on the explicit lock ordering of lockBatch and Sweep.
	forUpdate string
	// headForUpdate reads a session's state version, holding its head row (Watch).
	headForUpdate string
	// headLock reads a session's state version holding its head for the rest of the
	// transaction, creating a version-0 head when there is none (headLockSQL, lockHead),
	// so that concurrent first appends of a session find a row to wait on. "" on SQLite,
	// whose immediate transaction already holds the database write lock: lockHead only
	// reads (headSelectSQL).
	headLock string
	// bumpInsert assigns an event its sequence and inserts it in one statement
	// (eventBumpInsertSQL, PostgreSQL: one round trip); bumpMaterialInsert does that
	// for a notifying event and records it on the head (eventBumpMaterialInsertSQL).
	// Both return the sequence, then returnMore. "" on SQLite, which has no
	// data-modifying WITH and no round trips to save: headUpdateSQL (or, for a
	// notifying event, headUpdateMaterialSQL), then eventInsertSQL.
	bumpInsert, bumpMaterialInsert string
	// returnMore is what bumpInsert returns after the sequence: the transaction's id
	// (txid), so that an append needs no statement of its own to read it.
	returnMore string
	// cursorOfPair reads one watcher's cursor on one target, held when it is read to be
	// rewritten.
	cursorOfPair string
	// selecting reads the target's live cursors with a selection of their own (LIF-3),
	// held (notifyWatchers).
	selecting string
	// lockHeads and lockTargetsCursors take the locks of a batch of appends to several
	// sessions up front, in a global order (lockBatch): lockHeads upserts the heads in
	// (agent, key) order, as headLock does for one, and lockTargetsCursors locks every
	// cursor on those sessions in primary-key order. Their arguments are arrays
	// (agents, keys, kinds, in (agent, key) order), bound by the driver: they run as
	// cached statements only. "" on SQLite, whose immediate transaction already holds
	// the database write lock.
	lockHeads, lockTargetsCursors string
	// openNotices opens the notices of notifyWatchers and returns their count and list
	// in one statement (openNoticesReturnSQL: PostgreSQL, a data-modifying WITH). "" on
	// SQLite, which has none and no round trips to save: openNoticesSQL, then
	// openedNoticesSQL.
	openNotices string
	// txid reads the id of the current write transaction, so that a COMMIT whose answer
	// is lost can be resolved (outcome.go); "" when the database cannot lose one (SQLite
	// commits in-process). txidStatus asks, on another connection, what became of it.
	txid, txidStatus string
	// notify sends one cross-process hint (notify.go): channel, payload.
	notify string
}

var sqliteSQL = dialectSQL{
	headForUpdate: headSelectSQL,
	cursorOfPair:  cursorQuery(cursorOfPairWhere, "", ""),
	selecting:     cursorQuery(selectingWhere, "", ""),
}

const pgReturnTxid = ", txid_current()"

var pgSQL = dialectSQL{
	forUpdate:          " FOR UPDATE",
	headForUpdate:      headSelectSQL + " FOR UPDATE",
	headLock:           headLockSQL,
	bumpInsert:         eventBumpInsertSQL + pgReturnTxid,
	bumpMaterialInsert: eventBumpMaterialInsertSQL + pgReturnTxid,
	returnMore:         pgReturnTxid,
	cursorOfPair:       cursorQuery(cursorOfPairWhere, "", " FOR UPDATE"),
	selecting:          cursorQuery(selectingWhere, "", " FOR UPDATE"),
	openNotices:        openNoticesReturnSQL,
	lockHeads: `INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at)
SELECT a, k, c, 0, 0, ?, ? FROM unnest(?::text[], ?::text[], ?::text[]) WITH ORDINALITY AS v(a, k, c, i) ORDER BY i
ON CONFLICT (agent_id, session_key) DO UPDATE SET state_version = sessions.state_version`,
	lockTargetsCursors: `SELECT 1 FROM cursors WHERE (target_agent_id, target_key) IN (SELECT * FROM unnest(?::text[], ?::text[]))
ORDER BY watcher_key, target_agent_id, target_key FOR UPDATE`,
	txid:       "SELECT txid_current()",
	txidStatus: "SELECT txid_status(?)",
	notify:     "SELECT pg_notify(?, ?)",
}

// writeStatements lists the statements an append transaction may run, for the write
// pool's statement cache.
func (q dialectSQL) writeStatements() []string {
	return []string{
		headSelectSQL, q.headForUpdate, q.headLock, headBumpSetSQL, headBumpMaterialSQL, headUpdateSQL, headUpdateMaterialSQL, eventInsertSQL, q.bumpInsert, q.bumpMaterialInsert, dedupeSelectSQL,
		cursorSaveSQL, q.cursorOfPair, q.selecting, openNoticesSQL, openedNoticesSQL, q.openNotices, q.lockHeads, q.lockTargetsCursors,
		q.txid, q.notify,
	}
}

// readStatements lists the statements of the reconciliation read (read.go, readstream.go), for the
// read pool's statement cache.
func readStatements() []string {
	return []string{changesHeadSQL, statusHeadSQL, changesPageSQL, changesPackedSQL}
}
