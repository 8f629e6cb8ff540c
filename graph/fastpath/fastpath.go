// Package fastpath writes the responses the service sends most often in one pass,
// instead of letting gqlgen execute their selection once per field of every row: the
// events of a reconciliation page (StateChanges.events) and each item of the
// staleNotices and stateEvents subscriptions.
//
// Why: sessionStatus(changesSince:) is the query every agent runs before it acts on a
// notice, and a page holds up to 500 events. gqlgen resolves each field through a
// generic path that allocates a field context, closures and boxed values, which made
// the GraphQL layer cost about 2.5 times the database read of a 200-event page (B4,
// bench/GAPS.md). Events are immutable rows whose fields are all scalars, so the page
// can be written in one pass. A notice fanned out to 10,000 subscribers is written
// 10,000 times, so the same saving counts there.
//
// A page is written straight from the rows the store reads when the selection allows
// it (status.go): no []Event is built. The answer of recordEvent is written in one
// pass too (record.go).
//
// It only takes over selections it can write byte for byte as gqlgen would (the
// fields of StateEvent and StaleNotice and __typename, with aliases, fragments and
// @skip/@include already resolved by graphql.CollectFields; no @defer) and rows whose
// every value gqlgen would write without an error; anything else is left to gqlgen.
// The package holds no state of its own: what it counts and caches belongs to the
// FastPath a handler creates. The graph package's tests compare both paths byte for
// byte (pages and subscription frames, errors included) and by a differential fuzz
// test over random selections.
package fastpath

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
)

// ShapeCacheSize is the number of subscription selections whose item shape a FastPath
// keeps (LRU, see FastPath).
const ShapeCacheSize = 1000

// FastPath is the gqlgen field interceptor of the package: it lets the resolver run,
// then, for StateChanges.events, returns a graphql.Marshaler in place of the slice
// (gqlgen's resolveField accepts a Marshaler from the middleware chain and uses it as
// the field's value), and for the two subscriptions a stream function in place of
// gqlgen's (see stream).
//
// It counts what it wrote (PagesWritten, ItemsWritten) and shares the item shapes of
// plain subscription selections (fields only, no fragment or directive, so that
// variables cannot change them) between subscriptions: 10,000 dashboards or agents
// subscribed with the same query hold one shape, not 10,000. Create one with New per
// handler; it is safe for concurrent use.
type FastPath struct {
	pages, items atomic.Int64
	// streamed counts the pages written from the rows (pageSink).
	streamed atomic.Int64
	// results counts the recordEvent answers written (record).
	results atomic.Int64
	shapes  *lru.LRU[*shape]
	// feeds caches the shapes of feed subscriptions (feedShapes), as shapes does.
	feeds *lru.LRU[*feedShape]
	// bufs are the buffers of streamed pages (pageSink), reused.
	bufs sync.Pool
}

// New returns a FastPath with empty shape caches of ShapeCacheSize entries.
func New() *FastPath {
	return &FastPath{shapes: lru.New[*shape](ShapeCacheSize), feeds: lru.New[*feedShape](ShapeCacheSize)}
}

var _ interface {
	graphql.HandlerExtension
	graphql.FieldInterceptor
} = (*FastPath)(nil)

// ExtensionName implements graphql.HandlerExtension.
func (*FastPath) ExtensionName() string { return "FastPath" }

// Validate implements graphql.HandlerExtension.
func (*FastPath) Validate(graphql.ExecutableSchema) error { return nil }

// PagesWritten is the number of event pages the fast path wrote.
func (fp *FastPath) PagesWritten() int64 { return fp.pages.Load() }

// PagesStreamed is the number of the pages written (PagesWritten) that were written
// straight from the rows the store read, without building their events.
func (fp *FastPath) PagesStreamed() int64 { return fp.streamed.Load() }

// ResultsWritten is the number of recordEvent answers the fast path wrote.
func (fp *FastPath) ResultsWritten() int64 { return fp.results.Load() }

// ItemsWritten is the number of subscription items the fast path wrote.
func (fp *FastPath) ItemsWritten() int64 { return fp.items.Load() }

var stateEventTypes = []string{"StateEvent"}

// InterceptField implements graphql.FieldInterceptor.
func (fp *FastPath) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return next(ctx)
	}
	switch {
	case fc.Object == "Mutation" && fc.Field.Name == "recordEvent":
		return fp.record(ctx, fc, next)
	case fc.Object == "Query" && fc.Field.Name == "sessionStatus":
		return fp.status(ctx, fc, next)
	case fc.Object == "StateChanges" && fc.Field.Name == "events":
		return fp.page(ctx, fc, next)
	case fc.Object == "Subscription" && fc.Field.Name == "staleNotices":
		return stream(ctx, fc, next, fp.NoticeItems)
	case fc.Object == "Subscription" && fc.Field.Name == "stateEvents":
		return stream(ctx, fc, next, fp.EventItems)
	case fc.Object == "Subscription" && fc.Field.Name == "staleNoticeFeed":
		return feedStream(ctx, fc, next, fp.NoticeFeedItems)
	case fc.Object == "Subscription" && fc.Field.Name == "stateEventFeed":
		return feedStream(ctx, fc, next, fp.EventFeedItems)
	}
	return next(ctx)
}

func (fp *FastPath) page(ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver) (any, error) {
	res, err := next(ctx)
	if err != nil {
		return res, err
	}
	if s, ok := streamed(fc); ok {
		return streamedPage{sink: s, written: &fp.pages}, nil
	}
	events, ok := res.([]awareness.Event)
	if !ok {
		return res, nil
	}
	fields := graphql.CollectFields(graphql.GetOperationContext(ctx), fc.Field.Selections, stateEventTypes)
	cols, ok := eventColumns(fields)
	if !ok {
		return res, nil
	}
	for i := range events {
		if !writable(&events[i]) {
			return res, nil
		}
	}
	return eventPage{events: events, cols: cols, written: &fp.pages}, nil
}

// eventColumn is one selected field: its key as written ("alias": with the comma
// before it when it is not the first) and which value it writes.
type eventColumn struct {
	key   []byte
	field string
	alias string
}

func eventColumns(fields []graphql.CollectedField) ([]eventColumn, bool) {
	return columns(fields, "sequence", "kind", "actorType", "actorId", "summary", "occurredAt",
		"runId", "payload", "sessionKey", "agentId")
}

func noticeColumns(fields []graphql.CollectedField) ([]eventColumn, bool) {
	return columns(fields, "watcher", "target", "targetAgentId", "changesSince", "notifiedVersion",
		"materialVersion", "text", "wake", "openedAt", "targetGeneration", "watcherGeneration", "closed", "redelivered", "delivery")
}

// columnKey is what a column's value follows: a comma unless it is the first, then
// its quoted alias and a colon.
func columnKey(first bool, alias string) []byte {
	var b bytes.Buffer
	if !first {
		b.WriteByte(',')
	}
	writeQuoted(&b, alias)
	b.WriteByte(':')
	return b.Bytes()
}

// columns returns the keys to write for fields, or false when one of them is not a
// plain field of known (besides __typename) or is deferred.
func columns(fields []graphql.CollectedField, known ...string) ([]eventColumn, bool) {
	cols := make([]eventColumn, 0, len(fields))
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if len(f.Deferrables) > 0 || len(f.Selections) > 0 {
			return nil, false
		}
		if f.Name != "__typename" && !slices.Contains(known, f.Name) {
			return nil, false
		}
		if seen[f.Alias] {
			continue // gqlgen writes an alias once (its first field)
		}
		seen[f.Alias] = true
		cols = append(cols, eventColumn{key: columnKey(len(cols) == 0, f.Alias), field: f.Name, alias: f.Alias})
	}
	return cols, true
}

// writable reports whether gqlgen would write every field of e without an error (its
// enums known, its time set), so that writing it here cannot hide one.
func writable(e *awareness.Event) bool {
	return e.Kind.Valid() && e.ActorType.Valid() && !e.OccurredAt.IsZero()
}

type eventPage struct {
	events  []awareness.Event
	cols    []eventColumn
	written *atomic.Int64 // FastPath.pages
}

// MarshalGQL writes the page as gqlgen's Array of FieldSets would. gqlgen hands it
// the response's buffer: the page is written into it, grown once for the whole page
// from the size of its first event, not into a buffer of its own copied afterwards.
func (p eventPage) MarshalGQL(w io.Writer) {
	p.written.Add(1)
	buf, direct := w.(*bytes.Buffer)
	if !direct {
		buf = new(bytes.Buffer)
	}
	start := buf.Len()
	buf.WriteByte('[')
	for i := range p.events {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeEvent(buf, &p.events[i], p.cols)
		if i == 0 && len(p.events) > 1 {
			buf.Grow(p.restSize(buf.Len() - start))
		}
	}
	buf.WriteByte(']')
	if !direct {
		_, _ = w.Write(buf.Bytes())
	}
}

// restSize estimates the bytes of the events after the first, written in first bytes
// (with the '['): each is the first's size, less the first's texts and payload, plus
// its own, and 16 bytes for what varies besides (times, sequence digits), and a 32nd of
// the texts for their escapes, so that the buffer grows once, to about the page's size.
func (p eventPage) restSize(first int) int {
	var sel [8]bool
	for _, c := range p.cols {
		switch c.field {
		case "kind":
			sel[0] = true
		case "actorType":
			sel[1] = true
		case "actorId":
			sel[2] = true
		case "summary":
			sel[3] = true
		case "runId":
			sel[4] = true
		case "payload":
			sel[5] = true
		}
	}
	texts := func(e *awareness.Event) int {
		payload := len("null")
		if !e.Payload.IsZero() {
			payload = len(`{"channel":"","outcome":"","turns":}`) + len(e.Payload.Channel) + len(e.Payload.Outcome) + 10
		}
		n := 0
		for k, v := range [...]int{len(e.Kind), len(e.ActorType), len(e.ActorID), len(e.Summary), len(e.RunID), payload} {
			if sel[k] {
				n += v
			}
		}
		return n
	}
	fixed := first - texts(&p.events[0])
	n, text := 256, 0
	for i := 1; i < len(p.events); i++ {
		t := texts(&p.events[i])
		n += max(fixed+t, 0) + 16
		text += t
	}
	return n + text/32 // escapes, uncounted: a page of texts full of them grows again
}

// writeEvent writes the selected fields of an event that is writable.
func writeEvent(buf *bytes.Buffer, e *awareness.Event, cols []eventColumn) {
	buf.WriteByte('{')
	for _, c := range cols {
		buf.Write(c.key)
		switch c.field {
		case "__typename":
			buf.WriteString(`"StateEvent"`)
		case "sequence":
			writeInt(buf, e.Sequence)
		case "kind":
			writeEnum(buf, string(e.Kind), e.Kind.Valid())
		case "actorType":
			writeEnum(buf, string(e.ActorType), e.ActorType.Valid())
		case "actorId":
			writeOptional(buf, e.ActorID)
		case "summary":
			writeQuoted(buf, e.Summary)
		case "occurredAt":
			writeTime(buf, e.OccurredAt)
		case "runId":
			writeOptional(buf, e.RunID)
		case "payload":
			writePayload(buf, e.Payload)
		case "sessionKey":
			writeQuoted(buf, e.Session.Key)
		case "agentId":
			writeQuoted(buf, e.Session.AgentID)
		}
	}
	buf.WriteByte('}')
}

// writeEnum writes an enum value as gqlgen's generated marshaler does: its name, and
// "" for a value the schema does not know.
func writeEnum(buf *bytes.Buffer, name string, known bool) {
	if !known {
		name = ""
	}
	writeQuoted(buf, name)
}

// writeStreamedEvent writes one stateEvents item. An event without a time whose time
// is selected is null, with a "must not be null" error per selection of it, as
// gqlgen's null propagation makes it.
func writeStreamedEvent(ctx context.Context, buf *bytes.Buffer, e *awareness.Event, cols []eventColumn) {
	if e.OccurredAt.IsZero() && nullFields(ctx, cols, "occurredAt") {
		buf.WriteString("null")
		return
	}
	writeEvent(buf, e, cols)
}

// writeNotice writes one staleNotices item (a notice without an opening time, never
// pending and so never published, is null as in writeStreamedEvent).
func writeNotice(ctx context.Context, buf *bytes.Buffer, n *awareness.Notice, cols []eventColumn) {
	if n.OpenedAt.IsZero() && nullFields(ctx, cols, "openedAt") {
		buf.WriteString("null")
		return
	}
	buf.WriteByte('{')
	for _, c := range cols {
		buf.Write(c.key)
		switch c.field {
		case "__typename":
			buf.WriteString(`"StaleNotice"`)
		case "watcher":
			writeQuoted(buf, n.Watcher)
		case "target":
			writeQuoted(buf, n.Target.Key)
		case "targetAgentId":
			writeQuoted(buf, n.Target.AgentID)
		case "changesSince":
			writeInt(buf, n.ChangesSince)
		case "notifiedVersion":
			writeInt(buf, n.NotifiedVersion)
		case "materialVersion":
			writeInt(buf, n.MaterialVersion)
		case "text":
			writeQuoted(buf, n.Text)
		case "wake":
			buf.WriteString(strconv.FormatBool(n.Wake))
		case "openedAt":
			writeTime(buf, n.OpenedAt)
		case "targetGeneration":
			writeInt(buf, n.TargetGeneration)
		case "watcherGeneration":
			writeInt(buf, n.WatcherGeneration)
		case "closed":
			buf.WriteString(strconv.FormatBool(n.Closed))
		case "redelivered":
			buf.WriteString(strconv.FormatBool(n.Redelivered))
		case "delivery":
			writeInt(buf, int64(n.Delivery))
		}
	}
	buf.WriteByte('}')
}

// nullFields reports whether cols select field, adding for each selection the error
// gqlgen's generated marshaler adds for a null non-null field (path: the alias, as
// gqlgen reports it inside a subscription item).
func nullFields(ctx context.Context, cols []eventColumn, field string) bool {
	found := false
	for _, c := range cols {
		if c.field == field {
			found = true
			graphql.AddError(ctx, &gqlerror.Error{Message: "must not be null", Path: ast.Path{ast.PathName(c.alias)}})
		}
	}
	return found
}

// writeTime writes the Time scalar as scalar.MarshalTime does: RFC 3339 with
// nanoseconds, UTC, quoted (the text is printable ASCII, which strconv.Quote only
// wraps in quotes), formatted in place.
func writeTime(buf *bytes.Buffer, t time.Time) {
	b := append(buf.AvailableBuffer(), '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	buf.Write(append(b, '"'))
}

// writeInt writes an Int as gqlgen's marshalers do, formatted in place.
func writeInt(buf *bytes.Buffer, n int64) {
	buf.Write(strconv.AppendInt(buf.AvailableBuffer(), n, 10))
}

// writePayload writes an event payload as scalar.MarshalPayload does (null when
// zero), formatted in place.
func writePayload(buf *bytes.Buffer, p awareness.Payload) {
	if p.IsZero() {
		buf.WriteString("null")
		return
	}
	buf.Write(p.AppendJSON(buf.AvailableBuffer()))
}

var staleNoticeTypes = []string{"StaleNotice"}

// Items writes the items of one subscription field (staleNotices: T is
// awareness.Notice; stateEvents: awareness.Event) for its selection. Get one from
// FastPath.NoticeItems or FastPath.EventItems; it is immutable and safe for concurrent
// use.
type Items[T any] struct {
	sh    *shape
	write func(context.Context, *bytes.Buffer, *T, []eventColumn)
	// nulled tells the items gqlgen writes as null with an error (a non-null field
	// without a value): only those need a response context to collect it.
	nulled  func(*T) bool
	written *atomic.Int64 // FastPath.items
}

// Write appends to buf the response data of one item, byte for byte as gqlgen's
// ResolveFieldStream writes it: {"alias":item}, the item null (with a "must not be
// null" error added to ctx's response, as gqlgen's null propagation does) when gqlgen
// would null it. ctx is the operation's context (errors are added to it).
func (it *Items[T]) Write(ctx context.Context, buf *bytes.Buffer, v *T) {
	it.written.Add(1)
	buf.Write(it.sh.prefix)
	it.write(ctx, buf, v, it.sh.cols)
	buf.WriteByte('}')
}

// Append appends one item to b as Write does, outside an operation (the WebSocket
// push path writes it from the publisher), and returns the errors gqlgen would report
// with it (nil for an item that is not nulled).
func (it *Items[T]) Append(b []byte, v *T) ([]byte, gqlerror.List) {
	buf := bytes.NewBuffer(b)
	if !it.nulled(v) {
		it.Write(context.Background(), buf, v) // no error to report: no response context
		return buf.Bytes(), nil
	}
	rctx := graphql.WithResponseContext(context.Background(),
		func(_ context.Context, err error) *gqlerror.Error { return gqlerror.WrapIfUnwrapped(err) }, nil)
	it.Write(rctx, buf, v)
	return buf.Bytes(), graphql.GetErrors(rctx)
}

// NoticeItems returns the writer of a staleNotices field's items for the selection of
// fc (the field's context inside the operation ctx), or false when the fast path does
// not write that selection (gqlgen must).
func (fp *FastPath) NoticeItems(ctx context.Context, fc *graphql.FieldContext) (*Items[awareness.Notice], bool) {
	sh, ok := fp.shapeOf(ctx, fc, staleNoticeTypes, noticeColumns)
	if !ok {
		return nil, false
	}
	return &Items[awareness.Notice]{sh: sh, write: writeNotice, written: &fp.items,
		nulled: func(n *awareness.Notice) bool { return n.OpenedAt.IsZero() }}, true
}

// EventItems is NoticeItems for a stateEvents field.
func (fp *FastPath) EventItems(ctx context.Context, fc *graphql.FieldContext) (*Items[awareness.Event], bool) {
	sh, ok := fp.shapeOf(ctx, fc, stateEventTypes, eventColumns)
	if !ok {
		return nil, false
	}
	return &Items[awareness.Event]{sh: sh, write: writeStreamedEvent, written: &fp.items,
		nulled: func(e *awareness.Event) bool { return e.OccurredAt.IsZero() }}, true
}

// stream takes over a subscription field: it lets the resolver return its channel,
// then returns, in place of gqlgen's stream function, one that writes each item
// directly with the field's Items. gqlgen's resolveField accepts a value of the stream
// function's type from the middleware chain. A selection it cannot write is left to
// gqlgen.
func stream[T any](ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver,
	items func(context.Context, *graphql.FieldContext) (*Items[T], bool)) (any, error) {
	res, err := next(ctx)
	if err != nil {
		return res, err
	}
	ch, ok := res.(<-chan T)
	if !ok {
		return res, nil
	}
	it, ok := items(ctx, fc)
	if !ok {
		return res, nil
	}
	return func(ctx context.Context) graphql.Marshaler {
		select {
		case v, ok := <-ch:
			if !ok {
				return nil
			}
			return graphql.WriterFunc(func(w io.Writer) {
				// gqlgen's executor marshals into a bytes.Buffer of its own; write there
				// directly when it does.
				buf, direct := w.(*bytes.Buffer)
				if !direct {
					buf = new(bytes.Buffer)
				}
				it.Write(ctx, buf, &v)
				if !direct {
					_, _ = w.Write(buf.Bytes())
				}
			})
		case <-ctx.Done():
			return nil
		}
	}, nil
}

func writeOptional(buf *bytes.Buffer, s string) {
	if s == "" {
		buf.WriteString("null")
		return
	}
	writeQuoted(buf, s)
}

const hexDigits = "0123456789ABCDEF" // upper case, as gqlgen writes them

// writeQuoted writes s as gqlgen's MarshalString does: control characters, '"' and
// '\' escaped, every other byte (invalid UTF-8 included) as is.
func writeQuoted(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '\\' && c != '"' {
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '\t':
			buf.WriteString(`\t`)
		case '\r':
			buf.WriteString(`\r`)
		case '\n':
			buf.WriteString(`\n`)
		case '\\':
			buf.WriteString(`\\`)
		case '"':
			buf.WriteString(`\"`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}

// shape is what a subscription writes around and in each item.
type shape struct {
	prefix []byte // {"alias":
	cols   []eventColumn
}

// shapeOf returns the shape of a subscription field's selection, or false when the
// fast path cannot write it. The shapes of plain selections are shared (fp.shapes).
func (fp *FastPath) shapeOf(ctx context.Context, fc *graphql.FieldContext, types []string,
	cols func([]graphql.CollectedField) ([]eventColumn, bool)) (*shape, bool) {
	key, plain := plainKey(fc)
	if plain {
		if sh, ok := fp.shapes.Get(ctx, key); ok {
			return sh, true
		}
	}
	var fields []graphql.CollectedField
	if plain {
		// Plain fields collect to themselves, the first of each alias kept.
		for _, sel := range fc.Field.Selections {
			fields = append(fields, graphql.CollectedField{Field: sel.(*ast.Field)})
		}
	} else {
		fields = graphql.CollectFields(graphql.GetOperationContext(ctx), fc.Field.Selections, types)
	}
	cs, ok := cols(fields)
	if !ok {
		return nil, false
	}
	var open bytes.Buffer
	open.WriteByte('{')
	writeQuoted(&open, fc.Field.Alias)
	open.WriteByte(':')
	sh := &shape{prefix: open.Bytes(), cols: cs}
	if plain {
		fp.shapes.Add(ctx, key, sh)
	}
	return sh, true
}

// plainKey spells a selection of plain fields (no fragments, directives or
// sub-selections) as "object.field alias:name …"; plain is false otherwise.
func plainKey(fc *graphql.FieldContext) (key string, plain bool) {
	var b strings.Builder
	b.WriteString(fc.Object)
	b.WriteByte('.')
	b.WriteString(fc.Field.Name)
	b.WriteByte(' ')
	b.WriteString(fc.Field.Alias)
	if len(fc.Field.Directives) > 0 {
		return "", false
	}
	for _, sel := range fc.Field.Selections {
		f, ok := sel.(*ast.Field)
		if !ok || len(f.Directives) > 0 || len(f.SelectionSet) > 0 {
			return "", false
		}
		b.WriteByte(' ')
		b.WriteString(f.Alias)
		b.WriteByte(':')
		b.WriteString(f.Name)
	}
	return b.String(), true
}
