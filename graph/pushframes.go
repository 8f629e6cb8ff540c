package graph

import (
	"bytes"
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
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	it, ok := p.fp.NoticeItems(ctx, fc)
	if !ok {
		return nil, false
	}
	return itemWriter(it, func(n *awareness.Notice) bool { return n.OpenedAt.IsZero() }), true
}

// Events implements resolvers.FrameWriter.
func (p pushFrames) Events(ctx context.Context) (func([]byte, *awareness.Event) ([]byte, gqlerror.List), bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	it, ok := p.fp.EventItems(ctx, fc)
	if !ok {
		return nil, false
	}
	return itemWriter(it, func(e *awareness.Event) bool { return e.OccurredAt.IsZero() }), true
}

// itemWriter returns the function that appends one item with it. mayErr tells the
// items for which the writer may report errors (a null non-null field): only those
// are written with a response context that collects them.
func itemWriter[T any](it *fastpath.Items[T], mayErr func(*T) bool) func([]byte, *T) ([]byte, gqlerror.List) {
	return func(b []byte, v *T) ([]byte, gqlerror.List) {
		buf := bytes.NewBuffer(b)
		if !mayErr(v) {
			it.Write(context.Background(), buf, v) // no error to report: no context needed
			return buf.Bytes(), nil
		}
		rctx := graphql.WithResponseContext(context.Background(),
			func(_ context.Context, err error) *gqlerror.Error { return gqlerror.WrapIfUnwrapped(err) }, nil)
		it.Write(rctx, buf, v)
		return buf.Bytes(), graphql.GetErrors(rctx)
	}
}
