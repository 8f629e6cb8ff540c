package models

import (
	"context"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// minuteNanos buckets occurred_at, in unix nanoseconds, by integer division, which
// SQLite and PostgreSQL's bigint / bigint both truncate. It is a literal, not a
// parameter, so that GROUP BY 1 names the same expression on both.
const (
	minuteNanos    = "60000000000"
	nanosPerMinute = int64(60e9)
)

// Activity counts events per minute and kind for the dashboard's activity chart. One
// session's window is a range of its primary key filtered by occurred_at; the other
// forms use the events_occurred_at index.
func (s *Store) Activity(ctx context.Context, q awareness.ActivityQuery) ([]awareness.ActivityBucket, error) {
	var out []awareness.ActivityBucket
	err := s.read(ctx, "Activity", func(t *tx) error {
		out = nil
		var sb strings.Builder
		sb.WriteString("SELECT occurred_at / " + minuteNanos + " AS minute, kind, COUNT(*) FROM events WHERE occurred_at >= ? AND occurred_at < ?")
		args := []any{nanos(q.Since), nanos(q.Until)}
		switch {
		case q.Session != nil:
			sb.WriteString(" AND agent_id = ? AND session_key = ?")
			args = append(args, q.Session.AgentID, q.Session.Key)
		case q.AgentID != "":
			sb.WriteString(" AND agent_id = ?")
			args = append(args, q.AgentID)
		}
		sb.WriteString(" GROUP BY 1, 2 ORDER BY 1, 2")
		rows, err := t.query(sb.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				minute int64
				kind   string
				b      awareness.ActivityBucket
			)
			if err := rows.Scan(&minute, &kind, &b.Count); err != nil {
				return err
			}
			b.Minute = fromNanos(minute * nanosPerMinute)
			b.Kind = awareness.EventKind(kind)
			out = append(out, b)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
