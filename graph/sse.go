package graph

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/ssepush"
	"github.com/awareness/awareness/internal/substream"
)

const (
	// SSEKeepAliveInterval is how often an idle SSE stream gets a comment line, so that
	// proxies keep it open.
	SSEKeepAliveInterval = 15 * time.Second
	// SSEWriteTimeout bounds every write of an SSE stream, as wsgorilla.WriteTimeout
	// bounds a WebSocket frame: a client that stops reading loses its stream.
	SSEWriteTimeout = 10 * time.Second
)

// sseTransport serves subscriptions (and any operation) as Server-Sent Events in the
// graphql-sse protocol's "distinct connections" mode: a POST with a JSON body and
// Accept: text/event-stream, answered by one stream of `next` events and a final
// `complete`, as gqlgen's transport.SSE writes them. The request is read and checked as
// httpTransport reads a POST first, so a malformed one gets the same coded refusal,
// never an echo of its body. (The protocol's "single connection" mode, a reserved
// stream shared by several operations, is not served.)
//
// A subscription takes the push path (internal/ssepush): the request's ssepush.Stream
// is the operation's transport (substream.Op), which takes the resolver's
// subscription value and owns it; the hub pushes its values into the request's queue, and this request's goroutine hands them, one at a time,
// to the operation's channel and writes gqlgen's response for each, with the value's
// event id (FEED-2): an event's sequence on a stream of one session, a notice's
// [watcher, targetAgentId, target, notifiedVersion] (graph/resolvers: sseEventID,
// sseNoticeID), a marker's sequence. A reconnection's Last-Event-ID resumes an event
// stream of one session after that sequence (FEED-1); a notice stream sends every
// pending notice again, whatever it says (NTC-5). Nothing else waits for the stream:
// the loop sends the keep-alive comments itself.
//
// The stream ends without `complete` when the service, not the operation, ends it:
// when the hub drops it for falling behind (the same bounded buffer as on WebSockets)
// or for a gap in a feed's sequences, when the hub closes, when a write does not
// finish within SSEWriteTimeout, and at shutdown (the request's context is
// cancelled). graphql-sse's client then sees the connection close with its stream
// active and reconnects with its default retries; staleNotices sends every pending
// notice first (NTC-5), and an event stream resumes from the Last-Event-ID the client
// sends, as after a WebSocket close with 1012 or 1013. The server's read deadline is
// cleared for the stream's life (as a hijacked WebSocket's is), so
// http.Server.ReadTimeout does not end it.
type sseTransport struct{}

var _ graphql.Transport = sseTransport{}

// Supports takes what edge.Of calls SSE: POSTs whose Accept prefers
// text/event-stream.
func (sseTransport) Supports(r *http.Request) bool {
	return edge.Of(r) == edge.SSE
}

// Do implements graphql.Transport.
func (sseTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	if msg, ok := checkContentType(r); !ok {
		writeError(w, http.StatusUnsupportedMediaType, msg)
		return
	}
	body, err := readBody(r)
	var params *graphql.RawParams
	if err == nil {
		params, err = paramsFromBody(body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	start := graphql.Now()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{ResponseWriter: w, rc: rc, ctx: ctx, cut: cancel}
	push := ssepush.New(r.Header.Get("Last-Event-ID"), awareness.SubscriberBuffer, cancel)
	defer push.Stop()
	ctx = substream.With(ctx, push)

	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	oc, opErr := exec.CreateOperationContext(ctx, params)
	ctx = graphql.WithOperationContext(ctx, oc)

	h := sw.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("Content-Type", "text/event-stream")
	sw.event(":\n\n")
	if opErr != nil {
		sw.next("", exec.DispatchError(ctx, opErr))
		sw.event("event: complete\n\n")
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, oc)
	if !push.Adopted() {
		// A query, a mutation, or a subscription refused by its resolver.
		for {
			resp := responses(ctx)
			if resp == nil {
				break
			}
			sw.next("", resp)
		}
		sw.event("event: complete\n\n")
		return
	}
	keepAlive := time.NewTicker(SSEKeepAliveInterval)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return // the client went away, a drop, a failed write, shutdown: no complete
		case <-keepAlive.C:
			sw.event(": ping\n\n")
			continue
		case <-push.Wake():
		}
		for {
			id, ok, ended, reason := push.Next()
			if !ok {
				if !ended {
					break
				}
				if reason.Dropped || reason.Errors != nil {
					// Dropped (slow, a feed's gap) or the hub closed: the client is to
					// reconnect, and resumes.
					cancel()
					return
				}
				sw.event("event: complete\n\n")
				return
			}
			resp := responses(ctx)
			if resp == nil {
				return
			}
			sw.next(id, resp)
			keepAlive.Reset(SSEKeepAliveInterval)
		}
	}
}

// event writes one event (or comment) of the stream and flushes it.
func (s *sseWriter) event(text string) {
	_, _ = io.WriteString(s, text)
	s.Flush()
}

// next writes a `next` event with the response, and its id when it has one.
func (s *sseWriter) next(id string, resp *graphql.Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
	}
	buf := make([]byte, 0, len(b)+len(id)+32)
	buf = append(buf, "event: next\n"...)
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, _ = s.Write(buf)
	s.Flush()
}

// sseWriter bounds every write by SSEWriteTimeout and discards writes once the stream's
// context ended (a drop, shutdown, a failed write, or the client gone): gqlgen's SSE
// transport writes `complete` after any end, which would tell the client the
// subscription is over when it is to reconnect.
type sseWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	cut    context.CancelFunc
	failed atomic.Bool
}

func (s *sseWriter) Write(b []byte) (int, error) {
	if s.ctx.Err() != nil || s.failed.Load() {
		return len(b), nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(SSEWriteTimeout))
	n, err := s.ResponseWriter.Write(b)
	if err != nil {
		s.failed.Store(true)
		s.cut()
	}
	return n, err
}

// Flush implements http.Flusher (gqlgen's SSE transport requires one).
func (s *sseWriter) Flush() {
	if s.ctx.Err() != nil || s.failed.Load() {
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.failed.Store(true)
		s.cut()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (s *sseWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// IsStream reports whether r opens a long-lived stream on /query: a WebSocket upgrade
// or an SSE request (edge.Transport.Stream). The server ends such requests itself at
// shutdown; http.Server.Shutdown would wait for them.
func IsStream(r *http.Request) bool {
	return edge.Of(r).Stream()
}
