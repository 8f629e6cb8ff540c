// Package graph serves the GraphQL API: the schema (schema.graphqls, a superset of the public
// contract), the gqlgen code generated from it (graph/generated,
// graph/gqlmodel, graph/resolvers) and NewHandler, the /query endpoint with its
// transports, limits and error presenter.
package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/rs/cors"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/fastpath"
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/jsontext"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// Limits and timings of the /query endpoint.
const (
	// MaxRequestBytes bounds an HTTP request body and a WebSocket message.
	MaxRequestBytes = 1 << 20
	// ParserTokenLimit bounds the tokens of a query document. The work budget of a
	// request (MaxExpandedSelections, MaxIdenticalFields, CostBudget, MaxMutationFields)
	// is in cost.go.
	ParserTokenLimit = 15000
	// QueryCacheSize is the number of parsed documents kept (LRU).
	QueryCacheSize = 1000
	// APQCacheSize is the number of automatic persisted queries kept (LRU).
	APQCacheSize = 100

	// MaxQueryDepth bounds the nesting of an operation's selections (fragments
	// included). The deepest useful query of the schema has depth 4; GraphiQL's
	// introspection query about 15.
	MaxQueryDepth = 20

	// WSInitTimeout is the default time a client has to send connection_init
	// (closed with 4408 after it).
	WSInitTimeout = 10 * time.Second
	// WSPingPongInterval is the default graphql-transport-ws ping cadence; a client
	// that does not pong within twice the interval is dropped (dead-peer detection).
	WSPingPongInterval = 20 * time.Second
	// WSKeepAliveInterval is the legacy graphql-ws `ka` cadence.
	WSKeepAliveInterval = 15 * time.Second

	// MaxHeaderBytes is the http.Server header limit the service sets: above
	// MaxRequestBytes, so that a GET whose query string is over MaxRequestBytes gets the
	// coded 414 of checkBody rather than net/http's plain-text 431 (which only a
	// request line or headers over MaxHeaderBytes still get).
	MaxHeaderBytes = 2 * MaxRequestBytes

	// CORSMaxAge is how long a browser may cache a CORS preflight answer, in seconds.
	CORSMaxAge = 600
)

// Config wires NewHandler.
type Config struct {
	Service *awareness.Service
	Logger  *slog.Logger
	// AllowedOrigins are the extra browser origins allowed to call /query, over HTTP
	// (CORS) and WebSocket alike (patterns as wsgorilla.Transport.AllowedOrigins);
	// requests without Origin and same-host origins are always allowed.
	AllowedOrigins []string
	// WSConns, when set, tracks the open WebSocket connections, for the server to close
	// them with 1012 at shutdown (wsgorilla.Conns.CloseAll).
	WSConns *wsgorilla.Conns
	// Auth, when set, requires a bearer token on every request (see Authenticate);
	// nil serves without authentication.
	Auth *auth.Keyring
	// WSInitTimeout and WSPingPongInterval override the defaults of the same names
	// when positive.
	WSInitTimeout      time.Duration
	WSPingPongInterval time.Duration
	// Extensions are used before every other extension, so they see every operation
	// (the OpenTelemetry operation spans of internal/telemetry).
	Extensions []graphql.HandlerExtension
	// Budget is what each caller may spend (internal/budget): every operation is
	// charged its cost and writes (CostLimit) and every new document its parsing
	// (DocumentLimits); nil charges nothing. The open streams it caps are the
	// Service's (awareness.Config.Streams).
	Budget *budget.Budget

	// gqlgenEventPages turns the fast path (package fastpath) off, for the tests that
	// compare it with gqlgen's own execution.
	gqlgenEventPages bool
}

// NewHandler returns the /query handler: gqlgen over the WebSocket (wsgorilla), SSE
// (sseTransport), GraphQL over HTTP (httpTransport: POST, GET) and OPTIONS transports,
// with a query cache, automatic persisted queries, the work budget of cost.go
// (DocumentLimits before validation, a depth limit (DepthLimit) after it, then
// CostLimit, which charges cfg.Budget), a parser token limit, introspection (the
// playground needs it), the ErrorPresenter and RecoverFunc of package resolvers,
// StreamTransports (subscriptions only over WebSocket and SSE), the one-pass writers of event pages and subscription items (a
// fastpath.FastPath of its own), and MutationChecks (a request's mutation fields
// checked before the first writes). With cfg.Auth set,
// every request needs a bearer token (see authenticate and wsInit).
//
// In front of gqlgen, in this order: a request from a browser origin that is neither
// the page's own host nor one of cfg.AllowedOrigins is refused with 403 FORBIDDEN
// (HTTP and WebSocket alike; a request without Origin, a gateway's, always passes);
// CORS answers the preflights of allowed origins (rs/cors: methods GET and POST,
// headers Authorization, Content-Type and Accept, no credentials: the token travels in
// Authorization, never in a cookie); an Upgrade header on anything but a WebSocket
// handshake is refused with 400; authentication; request bodies over MaxRequestBytes
// (413), query strings over it (414), and request text that is not valid UTF-8 or that
// escapes a lone UTF-16 surrogate (400, jsontext.Valid; wsgorilla applies the same
// check to WebSocket messages): encoding/json would silently turn either into U+FFFD,
// altering a session key instead of rejecting it (KEY-4, ERR-2, ERR-3). A string
// literal of the document escaping one is refused by DocumentLimits, on every
// transport alike.
func NewHandler(cfg Config) http.Handler {
	h, _ := newHandler(cfg)
	return h
}

// newHandler is NewHandler, also returning the handler's fast path (nil when
// cfg.gqlgenEventPages turns it off), whose counters the tests read.
func newHandler(cfg Config) (http.Handler, *fastpath.FastPath) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	present := resolvers.ErrorPresenter(log)
	initTimeout, pingPong := WSInitTimeout, WSPingPongInterval
	if cfg.WSInitTimeout > 0 {
		initTimeout = cfg.WSInitTimeout
	}
	if cfg.WSPingPongInterval > 0 {
		pingPong = cfg.WSPingPongInterval
	}
	// The transport enforces the init timeout (closing with 4408, as
	// graphql-transport-ws asks) and sends the pings and `ka`s from a timer per
	// connection; an idle connection owns only its reader goroutine (wsgorilla).
	ws := wsgorilla.Transport{
		AllowedOrigins:    cfg.AllowedOrigins,
		Logger:            log,
		InitTimeout:       initTimeout,
		PingInterval:      pingPong,
		KeepAliveInterval: WSKeepAliveInterval,
		PayloadReadLimit:  MaxRequestBytes,
		Conns:             cfg.WSConns,
		InitFunc:          wsInit(cfg.Auth, log),
		ErrorFunc: func(_ context.Context, err error) {
			log.Debug("websocket error", "err", err)
		},
		CloseFunc: func(_ context.Context, code int) {
			log.Debug("websocket closed", "code", code)
		},
	}

	root := &resolvers.Resolver{Service: cfg.Service, Present: present}
	var fast *fastpath.FastPath
	if !cfg.gqlgenEventPages {
		fast = fastpath.New()
		root.Frames = pushFrames{fast, present} // WebSocket subscriptions on the push path
	}
	srv := handler.New(generated.NewExecutableSchema(generated.Config{Resolvers: root}))
	srv.AddTransport(ws)
	srv.AddTransport(transport.Options{AllowedMethods: []string{http.MethodGet, http.MethodPost}})
	srv.AddTransport(sseTransport{})
	srv.AddTransport(httpTransport{})
	queryCache := lru.New[*ast.QueryDocument](QueryCacheSize)
	srv.SetQueryCache(queryCache)
	srv.SetParserTokenLimit(ParserTokenLimit)
	srv.SetErrorPresenter(present)
	srv.SetRecoverFunc(resolvers.RecoverFunc())
	for _, e := range cfg.Extensions {
		srv.Use(e)
	}
	srv.Use(extension.Introspection{})
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](APQCacheSize)})
	// After the persisted query is resolved, before gqlgen parses and validates.
	srv.Use(DocumentLimits{TokenLimit: ParserTokenLimit, Cache: queryCache, Budget: cfg.Budget})
	srv.Use(DepthLimit{Max: MaxQueryDepth})
	srv.Use(CostLimit{Budget: cfg.Budget}) // last: an operation refused otherwise is not charged
	srv.Use(resolvers.StreamTransports{})
	if fast != nil {
		srv.Use(fast)
	}
	// Last, so that its check run of a request's mutation fields runs inside every
	// other extension, which sees the request once.
	srv.Use(MutationChecks{})

	cors := cors.New(cors.Options{
		// Only origins checkOrigin let through get this far.
		AllowOriginVaryRequestFunc: func(*http.Request, string) (bool, []string) { return true, nil },
		AllowedMethods:             []string{http.MethodGet, http.MethodPost},
		AllowedHeaders:             []string{"Authorization", "Content-Type", "Accept"},
		MaxAge:                     CORSMaxAge,
	})
	inner := authenticate(cfg.Auth, log, checkBody(srv))
	if cfg.Budget != nil {
		inner = budget.Remote(inner) // the caller of an unauthenticated request
	}
	return checkOrigin(cfg.AllowedOrigins, log, cors.Handler(checkUpgrade(ws.Guard(inner)))), fast
}

// checkOrigin refuses, with 403 FORBIDDEN, a request whose Origin wsgorilla.OriginAllowed
// refuses: a browser page of another origin than the service's own host and the
// allowed ones. A preflight from such an origin is refused too.
func checkOrigin(patterns []string, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if !wsgorilla.OriginAllowed(origin, r.Host, patterns) {
			log.Debug("request from a foreign origin refused", "origin", origin, "remote", r.RemoteAddr)
			w.Header().Add("Vary", "Origin")
			writeCodedError(w, http.StatusForbidden, awareness.EFORBIDDEN,
				"origin "+strconv.Quote(origin)+" may not call this service: start it with --allowed-origins naming the origin")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkUpgrade classifies the request (edge.Of) and refuses an Upgrade header on
// anything but a WebSocket handshake (a GET asking for "websocket": edge.Refused), in
// the GraphQL error shape, instead of letting gqlgen try and answer in plain text.
// The operations' context names the client (awareness.WithClient): the transport,
// and ClientHeader or the User-Agent. An operation that needs its transport gets it
// from there or from its substream.Op, not from a context mark of its own.
func checkUpgrade(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := edge.Of(r)
		if t == edge.Refused {
			writeError(w, http.StatusBadRequest, "Upgrade is only for a WebSocket handshake (GET with Upgrade: websocket); send plain GraphQL requests without it")
			return
		}
		name := r.Header.Get(ClientHeader)
		if name == "" {
			name = r.Header.Get("User-Agent")
		}
		next.ServeHTTP(w, r.WithContext(awareness.WithClient(r.Context(), awareness.ClientInfo{Transport: t.String(), Name: name})))
	})
}

// ClientHeader names the client in the acknowledgement history (a gateway's name and
// version); without it the User-Agent does.
const ClientHeader = "X-Awareness-Client"

// checkBody enforces MaxRequestBytes and text validity on POST bodies and GET query
// strings. WebSocket messages are checked by wsgorilla (read limit, UTF-8).
func checkBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case edge.Of(r) == edge.WebSocket:
		case r.Method == http.MethodPost:
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
			if err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than 1 MiB")
					return
				}
				writeError(w, http.StatusBadRequest, "could not read the request body")
				return
			}
			if !jsontext.Valid(body) {
				writeError(w, http.StatusBadRequest, jsontext.Message)
				return
			}
			r.Body = checkedBody{bytes.NewReader(body), body}
		case r.Method == http.MethodGet:
			if len(r.URL.RawQuery) > MaxRequestBytes {
				writeError(w, http.StatusRequestURITooLong, "query string is larger than 1 MiB")
				return
			}
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				writeError(w, http.StatusBadRequest, "malformed query string")
				return
			}
			// The query is a GraphQL document, whose literals DocumentLimits checks as
			// on every transport; the other parameters are JSON (variables, extensions).
			for name, vs := range q {
				for _, v := range vs {
					if ok := name == "query" && utf8.ValidString(v) || name != "query" && jsontext.Valid([]byte(v)); !ok {
						writeError(w, http.StatusBadRequest, jsontext.Message)
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// writeError answers a request refused before gqlgen, in the GraphQL response shape,
// with code INVALID_ARGUMENT.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeCodedError(w, status, awareness.EINVALID, msg)
}

// writeCodedError answers a request refused before gqlgen, in the GraphQL response
// shape, with the given extensions.code.
func writeCodedError(w http.ResponseWriter, status int, code, msg string) {
	type gqlError struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	}
	body, _ := json.Marshal(struct {
		Errors []gqlError `json:"errors"`
	}{[]gqlError{{Message: msg, Extensions: map[string]any{"code": code}}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
