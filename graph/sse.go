package graph

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/edge"
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
// `complete` (gqlgen's transport.SSE). The request is read and checked as httpTransport
// reads a POST first, so a malformed one gets the same coded refusal, never an echo of
// its body.
//
// The stream ends without `complete` when the service, not the operation, ends it:
// when the hub drops it for falling behind (the same bounded buffer as on WebSockets)
// or a write does not finish within SSEWriteTimeout, and at shutdown (the request's
// context is cancelled). graphql-sse's client then sees the connection close with its
// stream active, reconnects with its default retries, and staleNotices sends every
// pending notice first (NTC-5), as after a WebSocket close with 1012 or 1013. The
// server's read deadline is cleared for the stream's life (as a hijacked WebSocket's
// is), so http.Server.ReadTimeout does not end it.
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
	if err == nil {
		_, err = paramsFromBody(body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{ResponseWriter: w, rc: rc, ctx: ctx, cut: cancel}
	ctx = resolvers.WithStreamDrop(ctx, cancel)
	r = r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	transport.SSE{KeepAlivePingInterval: SSEKeepAliveInterval}.Do(sw, r, exec)
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
