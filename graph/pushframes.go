package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/graph/fastpath"
	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/awareness"
)

// pushFrames is the seam between the WebSocket push path (resolvers.FrameWriter)
// and the one-pass writer of subscription items (graph/fastpath): the same shapes and
// item writers, so a pushed frame is byte for byte the frame gqlgen's stream loop
// writes through the fast path.
type pushFrames struct{ fp *fastpath.FastPath }

var _ resolvers.FrameWriter = pushFrames{}

// Notices implements resolvers.FrameWriter.
func (p pushFrames) Notices(ctx context.Context) (func([]byte, *awareness.Notice) ([]byte, gqlerror.List), bool) {
	return appender(ctx, p.fp.NoticeItems)
}

// Events implements resolvers.FrameWriter.
func (p pushFrames) Events(ctx context.Context) (func([]byte, *awareness.Event) ([]byte, gqlerror.List), bool) {
	return appender(ctx, p.fp.EventItems)
}

// NoticeFeed implements resolvers.FrameWriter.
func (p pushFrames) NoticeFeed(ctx context.Context) (func([]byte, *awareness.Notice) ([]byte, gqlerror.List), resolvers.MarkWriter, bool) {
	return feedAppender(ctx, p.fp.NoticeFeedItems)
}

// EventFeed implements resolvers.FrameWriter.
func (p pushFrames) EventFeed(ctx context.Context) (func([]byte, *awareness.Event) ([]byte, gqlerror.List), resolvers.MarkWriter, bool) {
	return feedAppender(ctx, p.fp.EventFeedItems)
}

// feedAppender is appender for a feed field: its items' writer and its markers'.
func feedAppender[T any](ctx context.Context, items func(context.Context, *graphql.FieldContext) (*fastpath.Items[T], *fastpath.Marks, bool)) (
	func([]byte, *T) ([]byte, gqlerror.List), resolvers.MarkWriter, bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, nil, false
	}
	it, marks, ok := items(ctx, fc)
	if !ok {
		return nil, nil, false
	}
	return it.Append, marks.Append, true
}

// appender returns the item writer of the subscription field of ctx, or false when
// the fast path does not write its selection.
func appender[T any](ctx context.Context, items func(context.Context, *graphql.FieldContext) (*fastpath.Items[T], bool)) (
	func([]byte, *T) ([]byte, gqlerror.List), bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	it, ok := items(ctx, fc)
	if !ok {
		return nil, false
	}
	return it.Append, true
}
