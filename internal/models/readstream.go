package models

import (
	"context"
	"database/sql"
	"fmt"
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

// streamPage reads up to limit events after `after` into sink, setting ch.More.
// streamed is false when sink refused a row (ch.More is then unset).
func streamPage(t *tx, ref awareness.SessionRef, after int64, limit int, sink awareness.PageSink, ch *awareness.Changes) (
	streamed bool, count int, last int64, err error) {
	page := max(limit, 0)
	rows, err := t.query(changesPageSQL, ref.AgentID, ref.Key, after, page+1)
	if err != nil {
		return false, 0, 0, err
	}
	defer rows.Close()
	var (
		r                  awareness.PageRow
		occurred, recorded int64
		payload, dedupe    sql.RawBytes
	)
	dest := []any{&r.Sequence, (*sql.RawBytes)(&r.Kind), (*sql.RawBytes)(&r.ActorType), (*sql.RawBytes)(&r.ActorID),
		(*sql.RawBytes)(&r.Summary), &occurred, (*sql.RawBytes)(&r.RunID), &payload, &dedupe, &recorded}
	for rows.Next() {
		if count == page {
			ch.More = true
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return false, 0, 0, err
		}
		r.OccurredAt = fromNanos(occurred)
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
