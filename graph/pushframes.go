package graph

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/graph/fastpath"
	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/awareness"
)

// pushFrames is the seam between the WebSocket push path (resolvers.FrameWriter, a
// subscription value's Frame) and the one-pass writer of subscription items
// (graph/fastpath): the same shapes and item writers, wrapped as gqlgen wraps a
// subscription response (appendItemResponse), so a pushed frame is byte for byte the
// frame gqlgen's stream loop writes through the fast path.
type pushFrames struct {
	fp      *fastpath.FastPath
	present graphql.ErrorPresenterFunc
}

var _ resolvers.FrameWriter = pushFrames{}

// Notices implements resolvers.FrameWriter.
func (p pushFrames) Notices(ctx context.Context) (func([]byte, any) []byte, bool) {
	return itemFrame(ctx, p.fp.NoticeItems, p.present)
}

// Events implements resolvers.FrameWriter.
func (p pushFrames) Events(ctx context.Context) (func([]byte, any) []byte, bool) {
	return itemFrame(ctx, p.fp.EventItems, p.present)
}

// NoticeFeed implements resolvers.FrameWriter.
func (p pushFrames) NoticeFeed(ctx context.Context) (func([]byte, any) []byte, bool) {
	return feedFrame(ctx, p.fp.NoticeFeedItems, p.present)
}

// EventFeed implements resolvers.FrameWriter.
func (p pushFrames) EventFeed(ctx context.Context) (func([]byte, any) []byte, bool) {
	return feedFrame(ctx, p.fp.EventFeedItems, p.present)
}

// itemFrame returns the frame writer of the subscription field of ctx, whose values
// are *T, or false when the fast path does not write its selection.
func itemFrame[T any](ctx context.Context, items func(context.Context, *graphql.FieldContext) (*fastpath.Items[T], bool),
	present graphql.ErrorPresenterFunc) (func([]byte, any) []byte, bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	it, ok := items(ctx, fc)
	if !ok {
		return nil, false
	}
	return func(b []byte, v any) []byte { return appendItemResponse(b, v.(*T), it.Append, present) }, true
}

// feedFrame is itemFrame for a feed field, whose values are *T or awareness.FeedMark.
func feedFrame[T any](ctx context.Context, items func(context.Context, *graphql.FieldContext) (*fastpath.Items[T], *fastpath.Marks, bool),
	present graphql.ErrorPresenterFunc) (func([]byte, any) []byte, bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	it, marks, ok := items(ctx, fc)
	if !ok {
		return nil, false
	}
	return func(b []byte, v any) []byte {
		if m, ok := v.(awareness.FeedMark); ok {
			b = append(b, `{"data":`...)
			var seq *int64
			if m.Sequenced {
				seq = &m.Sequence
			}
			b = marks.Append(b, m.Kind == awareness.FeedSynced, seq, m.Replayed, m.At)
			return append(b, '}')
		}
		return appendItemResponse(b, v.(*T), it.Append, present)
	}, true
}

// appendItemResponse appends the payload of one subscription response as gqlgen's
// WebSocket transport writes it (json.Marshal of a graphql.Response: errors first
// when there are any, then data).
func appendItemResponse[T any](b []byte, v *T, write func([]byte, *T) ([]byte, gqlerror.List), present graphql.ErrorPresenterFunc) []byte {
	start := len(b)
	b = append(b, `{"data":`...)
	b, errs := write(b, v)
	b = htmlEscape(b, start+len(`{"data":`))
	if len(errs) == 0 {
		return append(b, '}')
	}
	data := append([]byte(nil), b[start+len(`{"data":`):]...)
	presented := make(gqlerror.List, len(errs))
	for i, e := range errs {
		presented[i] = present(context.Background(), e)
	}
	b = append(b[:start], `{"errors":`...)
	b = append(b, resolvers.ErrorsPayload(presented)...)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// htmlEscape escapes b[from:] as json.Marshal escapes the raw data of a response
// (json.HTMLEscape: <, >, &, U+2028, U+2029), which gqlgen's transport marshals; it
// copies nothing when there is nothing to escape, the usual case.
func htmlEscape(b []byte, from int) []byte {
	if !needsHTMLEscape(b[from:]) {
		return b
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, b[from:])
	return append(b[:from], esc.Bytes()...)
}

// needsHTMLEscape reports whether json.HTMLEscape would change b: whether it holds <,
// > or &, or U+2028 or U+2029 (E2 80 A8, E2 80 A9). Each search is a vectorised
// IndexByte: a 40 KB changes page without any costs microseconds, where the escaping
// pass costs a hundred.
func needsHTMLEscape(b []byte) bool {
	if bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, '>') >= 0 || bytes.IndexByte(b, '&') >= 0 {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], 0xE2)
		if j < 0 {
			return false
		}
		i += j
		if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			return true
		}
	}
}
