package fastpath

import (
	"bytes"
	"context"
	"io"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/graph/gqlmodel"
)

// The answer of recordEvent, the mutation every producer calls on every turn, is
// written in one pass too: its fields are scalars, the event (a StateEvent, as in a
// page) and the skipped watchers. A selection the fast path does not know, or an
// answer gqlgen would not write without an error, is left to gqlgen.

var (
	recordEventResultTypes = []string{"RecordEventResult"}
	skippedWatcherTypes    = []string{"SkippedWatcher"}
)

// resultColumn is one selected field of a RecordEventResult: its key as eventColumn's,
// and the columns of its object's fields (event, skippedWatchers).
type resultColumn struct {
	eventColumn
	sub []eventColumn
}

// record takes over a Mutation.recordEvent field: it lets the resolver (and the
// interceptors after this one) run, then returns the answer's writer in place of the
// answer when it can write it.
func (fp *FastPath) record(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err != nil {
		return res, err
	}
	r, ok := res.(gqlmodel.RecordEventResult)
	if !ok || r.Event == nil || r.SkippedWatchers == nil || !writable(r.Event) {
		return res, nil
	}
	cols, ok := recordColumns(ctx, fc)
	if !ok {
		return res, nil
	}
	return graphql.WriterFunc(func(w io.Writer) {
		fp.results.Add(1)
		buf, direct := w.(*bytes.Buffer)
		if !direct {
			buf = new(bytes.Buffer)
		}
		writeRecordResult(buf, &r, cols)
		if !direct {
			_, _ = w.Write(buf.Bytes())
		}
	}), nil
}

// recordColumns returns the columns of a recordEvent selection, or false when it
// selects a field the fast path does not write or defers one.
func recordColumns(ctx context.Context, fc *graphql.FieldContext) ([]resultColumn, bool) {
	oc := graphql.GetOperationContext(ctx)
	fields := graphql.CollectFields(oc, fc.Field.Selections, recordEventResultTypes)
	cols := make([]resultColumn, 0, len(fields))
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if len(f.Deferrables) > 0 {
			return nil, false
		}
		var (
			sub []eventColumn
			ok  = true
		)
		switch f.Name {
		case "__typename", "recorded", "stateVersion", "noticesOpened":
			ok = len(f.Selections) == 0
		case "event":
			sub, ok = eventColumns(graphql.CollectFields(oc, f.Selections, stateEventTypes))
		case "skippedWatchers":
			sub, ok = columns(graphql.CollectFields(oc, f.Selections, skippedWatcherTypes), "watcher", "reason")
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
		if seen[f.Alias] {
			continue // gqlgen writes an alias once (its first field)
		}
		seen[f.Alias] = true
		cols = append(cols, resultColumn{eventColumn: eventColumn{key: columnKey(len(cols) == 0, f.Alias), field: f.Name, alias: f.Alias}, sub: sub})
	}
	return cols, true
}

// writeRecordResult writes the selected fields of an answer record can write.
func writeRecordResult(buf *bytes.Buffer, r *gqlmodel.RecordEventResult, cols []resultColumn) {
	buf.WriteByte('{')
	for _, c := range cols {
		buf.Write(c.key)
		switch c.field {
		case "__typename":
			buf.WriteString(`"RecordEventResult"`)
		case "recorded":
			buf.WriteString(strconv.FormatBool(r.Recorded))
		case "event":
			writeEvent(buf, r.Event, c.sub)
		case "stateVersion":
			writeInt(buf, int64(r.StateVersion))
		case "noticesOpened":
			writeInt(buf, int64(r.NoticesOpened))
		case "skippedWatchers":
			buf.WriteByte('[')
			for i := range r.SkippedWatchers {
				if i > 0 {
					buf.WriteByte(',')
				}
				buf.WriteByte('{')
				for _, s := range c.sub {
					buf.Write(s.key)
					switch s.field {
					case "__typename":
						buf.WriteString(`"SkippedWatcher"`)
					case "watcher":
						writeQuoted(buf, r.SkippedWatchers[i].Watcher)
					case "reason":
						writeQuoted(buf, r.SkippedWatchers[i].Reason)
					}
				}
				buf.WriteByte('}')
			}
			buf.WriteByte(']')
		}
	}
	buf.WriteByte('}')
}
