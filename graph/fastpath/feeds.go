// The feed subscriptions (FEED-3): staleNoticeFeed and stateEventFeed, whose items are a
// union of the contract's item and the feed's markers.

package fastpath

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
)

var (
	feedSyncedTypes   = []string{"FeedSynced"}
	feedBookmarkTypes = []string{"FeedBookmark"}
)

// Marks writes the markers of one feed field for its selection: FeedSynced and
// FeedBookmark, each with the fields the selection asks of it (none: {}). It is
// immutable and safe for concurrent use.
type Marks struct {
	prefix         []byte
	synced, marked []eventColumn
	written        *atomic.Int64 // FastPath.items
}

// Append appends one marker to b as gqlgen writes the subscription's data
// ({"alias":{…}}): synced tells FeedSynced from FeedBookmark; sequence is null when
// nil.
func (m *Marks) Append(b []byte, synced bool, sequence *int64, replayed int, at time.Time) []byte {
	m.written.Add(1)
	buf := bytes.NewBuffer(b)
	buf.Write(m.prefix)
	cols, typename := m.marked, `"FeedBookmark"`
	if synced {
		cols, typename = m.synced, `"FeedSynced"`
	}
	buf.WriteByte('{')
	for _, c := range cols {
		buf.Write(c.key)
		switch c.field {
		case "__typename":
			buf.WriteString(typename)
		case "lastSequence":
			if sequence == nil {
				buf.WriteString("null")
			} else {
				writeInt(buf, *sequence)
			}
		case "replayed":
			writeInt(buf, int64(replayed))
		case "at":
			writeTime(buf, at)
		}
	}
	buf.WriteString("}}")
	return buf.Bytes()
}

// NoticeFeedItems returns the writers of a staleNoticeFeed field's notices and
// markers for the selection of fc, or false when the fast path does not write it.
func (fp *FastPath) NoticeFeedItems(ctx context.Context, fc *graphql.FieldContext) (*Items[awareness.Notice], *Marks, bool) {
	sh, marks, ok := fp.feedShapes(ctx, fc, staleNoticeTypes, noticeColumns)
	if !ok {
		return nil, nil, false
	}
	return &Items[awareness.Notice]{sh: sh, write: writeNotice, written: &fp.items,
		nulled: func(n *awareness.Notice) bool { return n.OpenedAt.IsZero() }}, marks, true
}

// EventFeedItems is NoticeFeedItems for a stateEventFeed field.
func (fp *FastPath) EventFeedItems(ctx context.Context, fc *graphql.FieldContext) (*Items[awareness.Event], *Marks, bool) {
	sh, marks, ok := fp.feedShapes(ctx, fc, stateEventTypes, eventColumns)
	if !ok {
		return nil, nil, false
	}
	return &Items[awareness.Event]{sh: sh, write: writeStreamedEvent, written: &fp.items,
		nulled: func(e *awareness.Event) bool { return e.OccurredAt.IsZero() }}, marks, true
}

// feedShape is what a feed subscription writes around and in each item and marker.
type feedShape struct {
	item  *shape
	marks *Marks
}

// feedShapes collects a feed field's selection for its item's type and for each
// marker's. The shapes of a selection of plain fields and inline fragments (no
// directive, no named fragment: variables cannot change them) are shared, as plain
// selections' are (fp.feeds).
func (fp *FastPath) feedShapes(ctx context.Context, fc *graphql.FieldContext, types []string,
	cols func([]graphql.CollectedField) ([]eventColumn, bool)) (*shape, *Marks, bool) {
	if len(fc.Field.Directives) > 0 {
		return nil, nil, false
	}
	key, cacheable := feedKey(fc)
	if cacheable {
		if fs, ok := fp.feeds.Get(ctx, key); ok {
			return fs.item, fs.marks, true
		}
	}
	item, marks, ok := fp.collectFeed(ctx, fc, types, cols)
	if ok && cacheable {
		fp.feeds.Add(ctx, key, &feedShape{item: item, marks: marks})
	}
	return item, marks, ok
}

// feedKey spells a feed field's selection of fields and inline fragments, without
// directives, sub-selections of fields or named fragments; cacheable is false
// otherwise.
func feedKey(fc *graphql.FieldContext) (key string, cacheable bool) {
	var b strings.Builder
	b.WriteString(fc.Object)
	b.WriteByte('.')
	b.WriteString(fc.Field.Name)
	b.WriteByte(' ')
	b.WriteString(fc.Field.Alias)
	var walk func(ast.SelectionSet) bool
	walk = func(set ast.SelectionSet) bool {
		for _, sel := range set {
			switch x := sel.(type) {
			case *ast.Field:
				if len(x.Directives) > 0 || len(x.SelectionSet) > 0 {
					return false
				}
				b.WriteByte(' ')
				b.WriteString(x.Alias)
				b.WriteByte(':')
				b.WriteString(x.Name)
			case *ast.InlineFragment:
				if len(x.Directives) > 0 {
					return false
				}
				b.WriteString(" ...")
				b.WriteString(x.TypeCondition)
				b.WriteString("{")
				if !walk(x.SelectionSet) {
					return false
				}
				b.WriteString(" }")
			default:
				return false
			}
		}
		return true
	}
	if !walk(fc.Field.Selections) {
		return "", false
	}
	return b.String(), true
}

// collectFeed is feedShapes without the cache.
func (fp *FastPath) collectFeed(ctx context.Context, fc *graphql.FieldContext, types []string,
	cols func([]graphql.CollectedField) ([]eventColumn, bool)) (*shape, *Marks, bool) {
	oc := graphql.GetOperationContext(ctx)
	item, ok := cols(graphql.CollectFields(oc, fc.Field.Selections, types))
	if !ok {
		return nil, nil, false
	}
	synced, ok := columns(graphql.CollectFields(oc, fc.Field.Selections, feedSyncedTypes), "lastSequence", "replayed", "at")
	if !ok {
		return nil, nil, false
	}
	marked, ok := columns(graphql.CollectFields(oc, fc.Field.Selections, feedBookmarkTypes), "lastSequence", "at")
	if !ok {
		return nil, nil, false
	}
	var open bytes.Buffer
	open.WriteByte('{')
	writeQuoted(&open, fc.Field.Alias)
	open.WriteByte(':')
	prefix := open.Bytes()
	return &shape{prefix: prefix, cols: item}, &Marks{prefix: prefix, synced: synced, marked: marked, written: &fp.items}, true
}

// feedStream is stream for a feed field, whose channel holds the item type T or the
// generated markers (gqlmodel.FeedSynced, gqlmodel.FeedBookmark, by pointer).
func feedStream[T any](ctx context.Context, fc *graphql.FieldContext, next graphql.Resolver,
	items func(context.Context, *graphql.FieldContext) (*Items[T], *Marks, bool)) (any, error) {
	res, err := next(ctx)
	if err != nil {
		return res, err
	}
	ch, ok := res.(<-chan gqlmodel.FeedItem)
	if !ok {
		return res, nil
	}
	it, marks, ok := items(ctx, fc)
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
				buf, direct := w.(*bytes.Buffer)
				if !direct {
					buf = new(bytes.Buffer)
				}
				switch x := v.(type) {
				case T:
					it.Write(ctx, buf, &x)
				case *T:
					it.Write(ctx, buf, x)
				case gqlmodel.FeedSynced:
					buf.Write(marks.Append(buf.AvailableBuffer(), true, seq64(x.LastSequence), x.Replayed, x.At))
				case *gqlmodel.FeedSynced:
					buf.Write(marks.Append(buf.AvailableBuffer(), true, seq64(x.LastSequence), x.Replayed, x.At))
				case gqlmodel.FeedBookmark:
					buf.Write(marks.Append(buf.AvailableBuffer(), false, seq64(x.LastSequence), 0, x.At))
				case *gqlmodel.FeedBookmark:
					buf.Write(marks.Append(buf.AvailableBuffer(), false, seq64(x.LastSequence), 0, x.At))
				default:
					panic(fmt.Sprintf("fastpath: a feed item of type %T", v)) // gqlgen's recover answers it
				}
				if !direct {
					_, _ = w.Write(buf.Bytes())
				}
			})
		case <-ctx.Done():
			return nil
		}
	}, nil
}

func seq64(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}
