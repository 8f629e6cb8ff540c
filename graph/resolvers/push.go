package resolvers

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
)

// The push path of the WebSocket subscriptions. gqlgen serves a subscription with a
// goroutine per operation that waits on the resolver's channel for as long as the
// subscription lasts: an idle subscriber costs its stack. On the push path the
// operation still runs through gqlgen (parsing, validation, authentication, the cost,
// depth and rate limits, this resolver), but the resolver's subscription value
// carries a writer of its frames (substream.Subscription.Frame, made here from
// FrameWriter), the transport opens it with the connection's queue as the hub's sink
// and the resolver returns a closed channel, so gqlgen's part of the operation ends at
// once. From then on the hub pushes each notice or event to the connection, whose
// writer (a goroutine only while it has frames to write) writes the frame, the
// pending notices first (NTC-5); nothing waits for an idle subscriber. The frames are
// gqlgen's, byte for byte: the items are written by graph's one-pass writer
// (FrameWriter), wrapped as gqlgen wraps a subscription response (appendResponse). A
// selection the writer cannot write takes gqlgen's own path (relay, feeds.go).

// FrameWriter writes the items of the staleNotices and stateEvents subscriptions for
// the push path: package graph's one-pass writer.
type FrameWriter interface {
	// Notices returns, for the staleNotices field of ctx (a resolver's context), a
	// function that appends one item as gqlgen writes the subscription's data
	// ({"alias":{…}}) and returns the errors gqlgen would report with it; false when
	// it cannot write the field's selection.
	Notices(ctx context.Context) (func(b []byte, n *awareness.Notice) ([]byte, gqlerror.List), bool)
	// Events is Notices for stateEvents.
	Events(ctx context.Context) (func(b []byte, e *awareness.Event) ([]byte, gqlerror.List), bool)
	// NoticeFeed is Notices for staleNoticeFeed, with the writer of the feed's
	// markers.
	NoticeFeed(ctx context.Context) (func(b []byte, n *awareness.Notice) ([]byte, gqlerror.List), MarkWriter, bool)
	// EventFeed is NoticeFeed for stateEventFeed.
	EventFeed(ctx context.Context) (func(b []byte, e *awareness.Event) ([]byte, gqlerror.List), MarkWriter, bool)
}

// noticeFrame is the Frame of the staleNotices field of ctx; nil when r has no
// FrameWriter or it cannot write the field's selection. eventFrame, noticeFeedFrame
// and eventFeedFrame are noticeFrame for the other subscription fields.
func (r *Resolver) noticeFrame(ctx context.Context) func([]byte, any) []byte {
	if r.Frames == nil {
		return nil
	}
	if write, ok := r.Frames.Notices(ctx); ok {
		return itemFrame(write, r.presenter())
	}
	return nil
}

func (r *Resolver) eventFrame(ctx context.Context) func([]byte, any) []byte {
	if r.Frames == nil {
		return nil
	}
	if write, ok := r.Frames.Events(ctx); ok {
		return itemFrame(write, r.presenter())
	}
	return nil
}

func (r *Resolver) noticeFeedFrame(ctx context.Context) func([]byte, any) []byte {
	if r.Frames == nil {
		return nil
	}
	if write, marks, ok := r.Frames.NoticeFeed(ctx); ok {
		return feedFrame(write, marks, r.presenter())
	}
	return nil
}

func (r *Resolver) eventFeedFrame(ctx context.Context) func([]byte, any) []byte {
	if r.Frames == nil {
		return nil
	}
	if write, marks, ok := r.Frames.EventFeed(ctx); ok {
		return feedFrame(write, marks, r.presenter())
	}
	return nil
}

// itemFrame is the Frame of a subscription of T items written by write.
func itemFrame[T any](write func([]byte, *T) ([]byte, gqlerror.List), present graphql.ErrorPresenterFunc) func([]byte, any) []byte {
	return func(b []byte, v any) []byte { return appendResponse(b, v.(*T), write, present) }
}

// feedFrame is the Frame of a feed of T items and markers.
func feedFrame[T any](write func([]byte, *T) ([]byte, gqlerror.List), marks MarkWriter, present graphql.ErrorPresenterFunc) func([]byte, any) []byte {
	return func(b []byte, v any) []byte {
		if m, ok := v.(awareness.FeedMark); ok {
			b = append(b, `{"data":`...)
			var seq *int64
			if m.Sequenced {
				seq = &m.Sequence
			}
			b = marks(b, m.Kind == awareness.FeedSynced, seq, m.Replayed, m.At)
			return append(b, '}')
		}
		return appendResponse(b, v.(*T), write, present)
	}
}

// MarkWriter appends the data of one feed marker as gqlgen writes it ({"alias":{…}}):
// synced tells FeedSynced from FeedBookmark; sequence is null when nil.
type MarkWriter func(b []byte, synced bool, sequence *int64, replayed int, at time.Time) []byte

// appendResponse appends the payload of one subscription response as gqlgen's
// WebSocket transport writes it (json.Marshal of a graphql.Response: errors first
// when there are any, then data).
func appendResponse[T any](b []byte, v *T, write func([]byte, *T) ([]byte, gqlerror.List), present graphql.ErrorPresenterFunc) []byte {
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
	b = append(b, errorsPayload(presented)...)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// htmlEscape escapes b[from:] as json.Marshal escapes the raw data of a response
// (json.HTMLEscape: <, >, &, U+2028, U+2029), which gqlgen's transport marshals; it
// copies nothing when there is nothing to escape, the usual case.
func htmlEscape(b []byte, from int) []byte {
	if !bytes.ContainsAny(b[from:], "<>&\u2028\u2029") {
		return b
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, b[from:])
	return append(b[:from], esc.Bytes()...)
}

// errorsPayload is the JSON of a list of GraphQL errors.
func errorsPayload(errs gqlerror.List) []byte {
	b, err := json.Marshal(errs)
	if err != nil {
		return []byte(`[{"message":"internal error","extensions":{"code":"INTERNAL"}}]`)
	}
	return b
}
