// Package client is the gateway half of the awareness protocol, for Go gateways
// (CLT-2, CLT-5). It speaks only the public GraphQL API of the service, and checks
// events with the service's own validation: the domain core's ValidateRecord and
// vocabulary tables, imported, not copied.
//
//   - [Recorder] records events through a durable local outbox. Record refuses at
//     once, with the service's *Error, an event the service would refuse; otherwise
//     it returns once the event is fsync'd to a file the gateway owns, never waiting
//     for the service. Senders deliver the spooled events in recordEvents batches of
//     up to 200, exactly once by a generated dedupeKey (SIG-4) that a retry after a
//     timed-out Record keeps, in order per session, across outages of the service
//     and crashes of the gateway (SIG-7), waiting what RATE_LIMITED's retryAfterMs
//     asks. A refused token stops delivery and says so through Err and Errors.
//   - [Watcher] follows staleNotices of watcher sessions, which may be added and
//     removed while it runs, over graphql-transport-ws, or over SSE when asked for or
//     when TransportAuto finds the upgrade refused, with reconnect and backoff. Drain
//     hands out the notices to inject into a prompt now; each is then held until Ack,
//     the exact acknowledgement with the service's outcome per notice, or Release,
//     after a failed turn, to drain it again. A notice is handed out once per opening
//     whatever the service replays, and the Watcher sends a failed Ack again. Stream
//     failures reach the caller through Errors and Err.
//   - [Client.Events] follows one session's stateEventFeed over a WebSocket or SSE,
//     resuming after the last sequence it delivered on every reconnection (FEED-1,
//     FEED-2): each event once, in order, with the feed's Synced and Bookmark markers
//     (FEED-3).
//   - [Client.Reconcile] pages sessionStatus(changesSince:) until complete, or reports
//     that a full refresh is needed: historyGap, CURSOR_AHEAD (REC-1..3).
//   - Typed calls: [Client.WatchTarget], [Client.UnwatchTarget],
//     [Client.PendingNotices], [Client.AcknowledgeNotices].
//
// Every call takes a context; every goroutine the package starts belongs to a
// Recorder, a Watcher or an EventFeed and ends in its Close, which never fails on a
// transport error.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Error codes of the service that the client acts on: extensions.code (ERR-1).
const (
	CodeInvalidArgument = "INVALID_ARGUMENT"
	CodeNotFound        = "NOT_FOUND"
	CodeCursorAhead     = "CURSOR_AHEAD"
	// CodeHistoryGap refuses a feed asked to resume below a session's retained
	// history (FEED-1); Error.EarliestAvailable says where the log starts.
	CodeHistoryGap      = "HISTORY_GAP"
	CodeUnauthenticated = "UNAUTHENTICATED"
	CodeForbidden       = "FORBIDDEN"
	CodeUnavailable     = "UNAVAILABLE"
	CodeInternal        = "INTERNAL"
	CodeRateLimited     = "RATE_LIMITED"
	CodeComplexity      = "COMPLEXITY_LIMIT_EXCEEDED"
	// CodeStaleGeneration refuses an exact acknowledgement of notices drained by an
	// earlier generation of their watcher (LIF-2): the watcher session was reset
	// since; nothing was acknowledged. The notices stay held, to release.
	CodeStaleGeneration = "STALE_GENERATION"
)

// DefaultTimeout bounds one HTTP request to the service.
const DefaultTimeout = 10 * time.Second

// Error is an error the service answered: a GraphQL error, or an HTTP status with
// the GraphQL error shape. Code is its extensions.code.
type Error struct {
	Code    string
	Message string
	// Status is the HTTP status of the answer.
	Status int
	// RetryAfter is the wait RATE_LIMITED asked for in extensions.retryAfterMs, 0
	// when it named none.
	RetryAfter time.Duration
	// EarliestAvailable is, on HISTORY_GAP, the oldest sequence the session's log
	// still holds: extensions.earliestAvailableSequence.
	EarliestAvailable int64
}

func (e *Error) Error() string {
	if e.Code == "" {
		return "awareness: " + e.Message
	}
	return "awareness: " + e.Code + ": " + e.Message
}

// ErrorCode returns the service's extensions.code of err, or "" when err is not an
// answer of the service, such as a transport failure or a timeout.
func ErrorCode(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// Permanent reports whether err is an answer that retrying the same request cannot
// change: the request is invalid or not allowed. Transport failures, answers without
// a code such as a proxy's 502, UNAVAILABLE, INTERNAL and RATE_LIMITED are not.
func Permanent(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return false
	}
	switch e.Code {
	case CodeUnavailable, CodeInternal, CodeRateLimited, "":
		return false
	}
	return true
}

// RetryAfter returns the wait RATE_LIMITED's retryAfterMs asked for before the same
// request is sent again, or 0.
func RetryAfter(err error) time.Duration {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.RetryAfter
	}
	return 0
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" on every request and in the
// WebSocket connection_init payload.
func WithToken(token string) Option { return func(c *Client) { c.authz = "Bearer " + token } }

// WithHTTPClient replaces the default HTTP client, one with DefaultTimeout.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout bounds each HTTP request; default DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithLogger sets the logger of the client and of the recorders and watchers built
// on it; by default they log nothing.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// Client talks to one awareness service. It is safe for concurrent use and holds no
// goroutine.
type Client struct {
	endpoint string // http(s)://host:port/query
	wsURL    string // ws(s)://host:port/query
	authz    string // the Authorization header value, or ""
	http     *http.Client
	timeout  time.Duration
	log      *slog.Logger
}

// New returns a client of the service whose GraphQL endpoint is endpoint, e.g.
// "http://127.0.0.1:8080/query"; a URL without a path gets /query.
func New(endpoint string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(endpoint))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("awareness client: endpoint %q: want http(s)://host:port/query", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/query"
	}
	c := &Client{endpoint: u.String(), timeout: DefaultTimeout}
	ws := *u
	ws.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	c.wsURL = ws.String()
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Endpoint is the GraphQL endpoint the client posts to.
func (c *Client) Endpoint() string { return c.endpoint }

type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

func (e gqlError) err(status int) *Error {
	code, _ := e.Extensions["code"].(string)
	out := &Error{Code: code, Message: e.Message, Status: status}
	if ms, ok := e.Extensions["retryAfterMs"].(float64); ok && ms > 0 {
		out.RetryAfter = time.Duration(ms * float64(time.Millisecond))
	}
	return out
}

// Do runs one GraphQL operation and decodes its data into out when out is non-nil.
// An answer with errors returns the first as an *Error.
func (c *Client) Do(ctx context.Context, query string, vars map[string]any, out any) error {
	data, err := c.DoRaw(ctx, query, vars)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("awareness client: decode the answer: %w", err)
	}
	return nil
}

// DoRaw runs one GraphQL operation and returns its data as the service wrote it.
func (c *Client) DoRaw(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	return c.doAuth(ctx, c.authorization(), query, vars)
}

func (c *Client) authorization() string { return c.authz }

// doAuth is DoRaw with an explicit Authorization header value; "" sends none.
func (c *Client) doAuth(ctx context.Context, authorization, query string, vars map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, fmt.Errorf("awareness client: encode the request: %w", err)
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("awareness client: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("awareness client: read the answer: %w", err)
	}
	var out struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("HTTP %d with a body that is not a GraphQL answer", resp.StatusCode)}
	}
	if len(out.Errors) > 0 {
		return nil, out.Errors[0].err(resp.StatusCode)
	}
	if resp.StatusCode >= 300 {
		return nil, &Error{Status: resp.StatusCode, Message: fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	return out.Data, nil
}

// WithAuthorization returns a copy of c that sends the given Authorization header
// value instead of its own token; "" sends none. The MCP server uses it to forward
// its caller's credentials.
func (c *Client) WithAuthorization(authorization string) *Client {
	cp := *c
	cp.authz = authorization
	return &cp
}
