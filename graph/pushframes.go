package graph

import (
	"bytes"
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/awareness"
)

// pushFrames is the seam between the WebSocket push path (resolvers.FrameWriter)
// and the one-pass writer of subscription items (EventPage's): the same shapes and
// item writers, so a pushed frame is byte for byte the frame gqlgen's stream loop
// writes through EventPage.
type pushFrames struct{}

var _ resolvers.FrameWriter = pushFrames{}

// Notices implements resolvers.FrameWriter.
func (pushFrames) Notices(ctx context.Context) (func([]byte, *awareness.Notice) ([]byte, gqlerror.List), bool) {
	return itemWriter(ctx, staleNoticeTypes, noticeColumns, writeNotice, func(n *awareness.Notice) bool { return n.OpenedAt.IsZero() })
}

// Events implements resolvers.FrameWriter.
func (pushFrames) Events(ctx context.Context) (func([]byte, *awareness.Event) ([]byte, gqlerror.List), bool) {
	return itemWriter(ctx, stateEventTypes, eventColumns, writeStreamedEvent, func(e *awareness.Event) bool { return e.OccurredAt.IsZero() })
}

// itemWriter returns the writer of one item of the subscription field of ctx, or
// false when the one-pass writer cannot write its selection. mayErr tells the items
// for which the writer may report errors (a null non-null field): only those are
// written with a response context that collects them.
func itemWriter[T any](ctx context.Context, types []string, cols func([]graphql.CollectedField) ([]eventColumn, bool),
	write func(context.Context, *bytes.Buffer, *T, []eventColumn), mayErr func(*T) bool) (func([]byte, *T) ([]byte, gqlerror.List), bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil, false
	}
	sh, ok := shapeOf(ctx, fc, types, cols)
	if !ok {
		return nil, false
	}
	return func(b []byte, v *T) ([]byte, gqlerror.List) {
		streamItemsWritten.Add(1)
		buf := bytes.NewBuffer(b)
		buf.Write(sh.prefix)
		var errs gqlerror.List
		if mayErr(v) {
			rctx := graphql.WithResponseContext(context.Background(),
				func(_ context.Context, err error) *gqlerror.Error { return gqlerror.WrapIfUnwrapped(err) }, nil)
			write(rctx, buf, v, sh.cols)
			errs = graphql.GetErrors(rctx)
		} else {
			write(context.Background(), buf, v, sh.cols) // no error to report: no context needed
		}
		buf.WriteByte('}')
		return buf.Bytes(), errs
	}, true
}
