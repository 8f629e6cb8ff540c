package graph

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/graph/scalar"
	"github.com/awareness/awareness/internal/awareness"
)

// EventPage writes the events of a reconciliation page (StateChanges.events) directly,
// instead of letting gqlgen execute the selection once per field of every event.
//
// Why: sessionStatus(changesSince:) is the query every agent runs before it acts on a
// notice, and a page holds up to 500 events. gqlgen resolves each field through a
// generic path that allocates a field context, closures and boxed values, which made
// the GraphQL layer cost about 2.5 times the database read of a 200-event page (B4,
// bench/GAPS.md). Events are immutable rows whose fields are all scalars, so the page
// can be written in one pass.
//
// It is a field interceptor: it lets the resolver run, then, for StateChanges.events
// only, returns a graphql.Marshaler in place of the slice (gqlgen's resolveField
// accepts a Marshaler from the middleware chain and uses it as the field's value).
// It only takes over selections it can write byte for byte as gqlgen would (the
// fields of StateEvent and __typename, with aliases, fragments and @skip/@include
// already resolved by graphql.CollectFields; no @defer) and events whose every value
// gqlgen would write without an error; anything else is left to gqlgen.
// eventpage_test.go compares both paths byte for byte.
type EventPage struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.FieldInterceptor
} = EventPage{}

// ExtensionName implements graphql.HandlerExtension.
func (EventPage) ExtensionName() string { return "EventPage" }

// Validate implements graphql.HandlerExtension.
func (EventPage) Validate(graphql.ExecutableSchema) error { return nil }

var stateEventTypes = []string{"StateEvent"}

// InterceptField implements graphql.FieldInterceptor.
func (EventPage) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || fc.Object != "StateChanges" || fc.Field.Name != "events" {
		return next(ctx)
	}
	res, err := next(ctx)
	if err != nil {
		return res, err
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
	return eventPage{events: events, cols: cols}, nil
}

// eventColumn is one selected field: its key as written ("alias": with the comma
// before it when it is not the first) and which value it writes.
type eventColumn struct {
	key   []byte
	field string
}

func eventColumns(fields []graphql.CollectedField) ([]eventColumn, bool) {
	cols := make([]eventColumn, 0, len(fields))
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if len(f.Deferrables) > 0 || len(f.Selections) > 0 {
			return nil, false
		}
		switch f.Name {
		case "__typename", "sequence", "kind", "actorType", "actorId", "summary", "occurredAt",
			"runId", "payload", "sessionKey", "agentId":
		default:
			return nil, false
		}
		if seen[f.Alias] {
			continue // gqlgen writes an alias once (its first field)
		}
		seen[f.Alias] = true
		var b bytes.Buffer
		if len(cols) > 0 {
			b.WriteByte(',')
		}
		writeQuoted(&b, f.Alias)
		b.WriteByte(':')
		cols = append(cols, eventColumn{key: b.Bytes(), field: f.Name})
	}
	return cols, true
}

// writable reports whether gqlgen would write every field of e without an error (its
// enums known, its time set), so that writing it here cannot hide one.
func writable(e *awareness.Event) bool {
	return e.Kind.Valid() && e.ActorType.Valid() && !e.OccurredAt.IsZero()
}

// eventPagesWritten counts the pages the fast path wrote (the tests check it ran).
var eventPagesWritten atomic.Int64

type eventPage struct {
	events []awareness.Event
	cols   []eventColumn
}

// MarshalGQL writes the page as gqlgen's Array of FieldSets would.
func (p eventPage) MarshalGQL(w io.Writer) {
	eventPagesWritten.Add(1)
	b := make([]byte, 0, 64+len(p.events)*64*len(p.cols))
	buf := bytes.NewBuffer(b)
	buf.WriteByte('[')
	for i := range p.events {
		if i > 0 {
			buf.WriteByte(',')
		}
		e := &p.events[i]
		buf.WriteByte('{')
		for _, c := range p.cols {
			buf.Write(c.key)
			switch c.field {
			case "__typename":
				buf.WriteString(`"StateEvent"`)
			case "sequence":
				buf.WriteString(strconv.FormatInt(e.Sequence, 10))
			case "kind":
				writeQuoted(buf, string(e.Kind))
			case "actorType":
				writeQuoted(buf, string(e.ActorType))
			case "actorId":
				writeOptional(buf, e.ActorID)
			case "summary":
				writeQuoted(buf, e.Summary)
			case "occurredAt":
				// scalar.MarshalTime: RFC 3339 with nanoseconds, UTC, Go-quoted.
				buf.WriteString(strconv.Quote(e.OccurredAt.UTC().Format(time.RFC3339Nano)))
			case "runId":
				writeOptional(buf, e.RunID)
			case "payload":
				scalar.MarshalPayload(e.Payload).MarshalGQL(buf)
			case "sessionKey":
				writeQuoted(buf, e.Session.Key)
			case "agentId":
				writeQuoted(buf, e.Session.AgentID)
			}
		}
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	_, _ = w.Write(buf.Bytes())
}

func writeOptional(buf *bytes.Buffer, s string) {
	if s == "" {
		buf.WriteString("null")
		return
	}
	writeQuoted(buf, s)
}

const hexDigits = "0123456789abcdef"

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
