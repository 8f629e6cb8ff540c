package models

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/awareness/awareness/internal/awareness"
)

var _ awareness.PageStreamer = (*Store)(nil)

// ReadStatusTo is ReadStatus with the page's events handed to sink as they are read
// (awareness.PageStreamer): each row is scanned into reused buffers and passed on,
// no Event is built. When sink refuses a row, the page is read again into
// Changes.Events in the same read transaction, so that the answer still comes from
// one snapshot (REC-1).
func (s *Store) ReadStatusTo(ctx context.Context, ref awareness.SessionRef, after int64, limit int, sink awareness.PageSink) (
	ch awareness.Changes, sess *awareness.Session, streamed bool, count int, last int64, err error) {
	err = s.read(ctx, "ReadChanges", func(t *tx) error {
		var found bool
		ch, sess, found, err = readHead(t, ref, true)
		if err != nil || !found {
			return err
		}
		streamed, count, last, err = streamPage(t, ref, after, limit, sink, &ch)
		if err != nil || streamed {
			return err
		}
		count, last = 0, 0
		return readPage(t, ref, after, limit, &ch)
	})
	if err != nil {
		return awareness.Changes{}, nil, false, 0, 0, err
	}
	return ch, sess, streamed, count, last, nil
}

// changesPackedSQL is changesPageSQL with the columns a page's response needs packed
// into one text value per row (unpackRow reads it): the drivers hand over a value per
// column, allocated, and on a page of 500 events those were most of the read's
// allocations; packed, a row is one. A text is spelled "<bytes>:<text>", NULL "-";
// the two integers end with ';'. octet_length and || mean the same on SQLite (3.43
// and later) and PostgreSQL.
const changesPackedSQL = "SELECT sequence || ';' || occurred_at || ';' || " +
	"COALESCE(octet_length(kind) || ':' || kind, '-') || " +
	"COALESCE(octet_length(actor_type) || ':' || actor_type, '-') || " +
	"COALESCE(octet_length(actor_id) || ':' || actor_id, '-') || " +
	"COALESCE(octet_length(summary) || ':' || summary, '-') || " +
	"COALESCE(octet_length(run_id) || ':' || run_id, '-') || " +
	"COALESCE(octet_length(payload_json) || ':' || payload_json, '-') " +
	"FROM events WHERE agent_id = ? AND session_key = ? AND sequence > ? ORDER BY sequence LIMIT ?"

// streamPage reads up to limit events after `after` into sink, setting ch.More.
// streamed is false when sink refused a row or a row did not unpack (ch.More is then
// unset): the caller reads the page again into ch.Events.
func streamPage(t *tx, ref awareness.SessionRef, after int64, limit int, sink awareness.PageSink, ch *awareness.Changes) (
	streamed bool, count int, last int64, err error) {
	page := max(limit, 0)
	rows, err := t.query(changesPackedSQL, ref.AgentID, ref.Key, after, page+1)
	if err != nil {
		return false, 0, 0, err
	}
	defer rows.Close()
	var (
		r       awareness.PageRow
		packed  sql.RawBytes
		payload []byte
	)
	for rows.Next() {
		if count == page {
			ch.More = true
			break
		}
		if err := rows.Scan(&packed); err != nil {
			return false, 0, 0, err
		}
		if !unpackRow(packed, &r, &payload) {
			return false, 0, 0, nil
		}
		r.Payload = awareness.Payload{}
		if payload != nil {
			// A view of the row's bytes: the payload's strings are, like the row's
			// texts, valid only until sink.Row returns (awareness.PageRow).
			if r.Payload, err = awareness.ParsePayload(unsafe.String(unsafe.SliceData(payload), len(payload))); err != nil {
				return false, 0, 0, fmt.Errorf("event %s/%s#%d: decode payload: %w", ref.AgentID, ref.Key, r.Sequence, err)
			}
		}
		if !sink.Row(ref, &r) {
			return false, 0, 0, nil
		}
		count++
		last = r.Sequence
	}
	if err := rows.Err(); err != nil {
		return false, 0, 0, err
	}
	return true, count, last, nil
}

// unpackRow reads a row of changesPackedSQL into r and payload (nil when NULL), its
// texts slices of b. It reports false when b is not such a row.
func unpackRow(b []byte, r *awareness.PageRow, payload *[]byte) bool {
	var (
		occurred int64
		ok       bool
	)
	if r.Sequence, b, ok = packedInt(b, ';'); !ok {
		return false
	}
	if occurred, b, ok = packedInt(b, ';'); !ok {
		return false
	}
	r.OccurredAt = fromNanos(occurred)
	for _, dst := range [...]*[]byte{&r.Kind, &r.ActorType, &r.ActorID, &r.Summary, &r.RunID, payload} {
		if len(b) > 0 && b[0] == '-' {
			*dst, b = nil, b[1:]
			continue
		}
		var n int64
		if n, b, ok = packedInt(b, ':'); !ok || n > int64(len(b)) {
			return false
		}
		*dst, b = b[:n:n], b[n:]
	}
	return len(b) == 0
}

// packedInt reads the decimal integer before end at the start of b and returns it and
// what follows end.
func packedInt(b []byte, end byte) (int64, []byte, bool) {
	i := bytes.IndexByte(b, end)
	if i < 1 {
		return 0, nil, false
	}
	n, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(b), i), 10, 64)
	if err != nil {
		return 0, nil, false
	}
	return n, b[i+1:], true
}
