package fastpath

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
)

// A sessionStatus(changesSince:) page is written straight from the rows the store
// reads: when the field's selection has one stateChanges with one events field that
// the fast path writes, status hands the Service a pageSink (awareness.WithPageSink),
// which writes each row as it is scanned, in the read transaction, into a buffer of
// its own; no []Event is built. The events field (page) then finds the sink in its
// parent's result (StatusChanges.Streamed) and copies the buffer into the response.
// The head, stateVersion and the page come from one read transaction as before.

var (
	sessionStatusTypes = []string{"SessionStatus"}
	stateChangesTypes  = []string{"StateChanges"}
)

// maxPooledPage is the largest page buffer a FastPath keeps for reuse.
const maxPooledPage = 1 << 20

// status takes over a Query.sessionStatus field whose page it can write.
func (fp *FastPath) status(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	cols, ok := statusColumns(ctx, fc)
	if !ok {
		return next(ctx)
	}
	return next(awareness.WithPageSink(ctx, &pageSink{fp: fp, cols: cols}))
}

// statusColumns returns the columns of the events of a sessionStatus selection, or
// false unless it selects exactly one stateChanges with exactly one events field (no
// @defer) whose selection the fast path writes: only then is the sink's page the one
// field it answers.
func statusColumns(ctx context.Context, fc *graphql.FieldContext) ([]eventColumn, bool) {
	oc := graphql.GetOperationContext(ctx)
	changes, ok := only(graphql.CollectFields(oc, fc.Field.Selections, sessionStatusTypes), "stateChanges")
	if !ok {
		return nil, false
	}
	events, ok := only(graphql.CollectFields(oc, changes.Selections, stateChangesTypes), "events")
	if !ok {
		return nil, false
	}
	return eventColumns(graphql.CollectFields(oc, events.Selections, stateEventTypes))
}

// only returns the one field of fields named name, false when there is none, more
// than one (aliases) or it is deferred.
func only(fields []graphql.CollectedField, name string) (graphql.CollectedField, bool) {
	var (
		found graphql.CollectedField
		n     int
	)
	for _, f := range fields {
		if f.Name == name {
			found = f
			n++
		}
	}
	return found, n == 1 && len(found.Deferrables) == 0
}

// pageSink writes the events of one page as the store reads them
// (awareness.PageSink): '[' and the events, comma separated, into buf.
type pageSink struct {
	fp   *FastPath
	cols []eventColumn
	buf  *bytes.Buffer
}

// Row implements awareness.PageSink. It refuses a row gqlgen would not write without
// an error (an unknown kind or actor type), as page does.
func (s *pageSink) Row(ref awareness.SessionRef, r *awareness.PageRow) bool {
	kind, ok := known(awareness.AllEventKinds, r.Kind)
	if !ok {
		return false
	}
	actor, ok := known(awareness.AllActorTypes, r.ActorType)
	if !ok {
		return false
	}
	if s.buf == nil {
		s.buf = s.fp.pageBuffer()
		s.buf.WriteByte('[')
	} else {
		s.buf.WriteByte(',')
	}
	// The texts are views of the row's bytes, written before Row returns.
	e := awareness.Event{Session: ref, Sequence: r.Sequence, Kind: kind, ActorType: actor,
		ActorID: view(r.ActorID), Summary: view(r.Summary), OccurredAt: r.OccurredAt,
		RunID: view(r.RunID), Payload: r.Payload}
	writeEvent(s.buf, &e, s.cols)
	return true
}

// known returns the value of values spelled b.
func known[T ~string](values []T, b []byte) (T, bool) {
	for _, v := range values {
		if string(v) == string(b) {
			return v, true
		}
	}
	return "", false
}

// view is b as a string without a copy; it must not outlive b's contents.
func view(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (fp *FastPath) pageBuffer() *bytes.Buffer {
	if b, ok := fp.bufs.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

// streamedPage is the events field of a page a pageSink wrote.
type streamedPage struct {
	sink    *pageSink
	written *atomic.Int64 // FastPath.pages
}

// MarshalGQL writes the sink's page, then gives its buffer back to the FastPath.
func (p streamedPage) MarshalGQL(w io.Writer) {
	p.written.Add(1)
	s := p.sink
	s.fp.streamed.Add(1)
	if s.buf == nil {
		_, _ = io.WriteString(w, "[]")
		return
	}
	s.buf.WriteByte(']')
	_, _ = w.Write(s.buf.Bytes())
	if s.buf.Cap() <= maxPooledPage {
		s.buf.Reset()
		s.fp.bufs.Put(s.buf)
	}
	s.buf = nil
}

// streamed returns the page a pageSink wrote for the events field of fc, if any.
func streamed(fc *graphql.FieldContext) (*pageSink, bool) {
	if fc.Parent == nil {
		return nil, false
	}
	sc, ok := fc.Parent.Result.(*awareness.StatusChanges)
	if !ok || sc == nil {
		return nil, false
	}
	s, ok := sc.Streamed.(*pageSink)
	return s, ok
}
