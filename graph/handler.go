// Package graph serves the GraphQL API: the schema (schema.graphqls, the public
// contract verbatim), the gqlgen code generated from it (graph/generated,
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
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
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
)

// Config wires NewHandler.
type Config struct {
	Service *awareness.Service
	Logger  *slog.Logger
	// AllowedOrigins are the extra browser origins allowed to open a WebSocket
	// (wsgorilla.Implementation.AllowedOrigins); requests without Origin and
	// same-host origins are always allowed.
	AllowedOrigins []string
	// Auth, when set, requires a bearer token on every request (see Authenticate);
	// nil serves without authentication.
	Auth *auth.Keyring
	// WSInitTimeout and WSPingPongInterval override the defaults of the same names
	// when positive.
	WSInitTimeout      time.Duration
	WSPingPongInterval time.Duration
	// RateLimit is the sustained rate of mutations and subscriptions per token (per
	// connection without authentication), in operations per second, with bursts of
	// RateBurst (see RateLimit); 0 sets no limit.
	RateLimit float64
	RateBurst int

	// gqlgenEventPages turns the EventPage fast path off, for the tests that compare
	// it with gqlgen's own execution.
	gqlgenEventPages bool
}

// NewHandler returns the /query handler: gqlgen over the WebSocket (gorilla), OPTIONS,
// GET and POST transports, with a query cache, automatic persisted queries, the work
// budget of cost.go (DocumentLimits before validation, CostLimit after it), a depth
// limit (DepthLimit), a parser token limit, introspection
// (the playground needs it), the ErrorPresenter and RecoverFunc of package resolvers,
// and StreamErrors. With cfg.Auth set, every request needs a bearer token (see
// authenticate and wsInit).
//
// In front of gqlgen it refuses WebSocket upgrades from foreign origins (403), request
// bodies over MaxRequestBytes (413) and request text that is not valid UTF-8 or that
// escapes a lone UTF-16 surrogate (400): encoding/json would silently turn either into
// U+FFFD, altering a session key instead of rejecting it (KEY-4, ERR-2).
func NewHandler(cfg Config) http.Handler {
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
	// The adapter enforces the init timeout (closing with 4408, as graphql-transport-ws
	// asks); gqlgen's own InitTimeout stays 0, as it would close with 1002. The adapter
	// also sends the pings and `ka`s from a timer per connection: gqlgen's
	// PingPongInterval and KeepAlivePingInterval would each keep a goroutine and a
	// ticker per connection, so they stay 0.
	ws := wsgorilla.Implementation{
		AllowedOrigins:    cfg.AllowedOrigins,
		Logger:            log,
		InitTimeout:       initTimeout,
		PingInterval:      pingPong,
		KeepAliveInterval: WSKeepAliveInterval,
	}
	readLimit := int64(MaxRequestBytes)

	srv := handler.New(generated.NewExecutableSchema(resolvers.NewExecutableSchema(cfg.Service)))
	srv.AddTransport(transport.Websocket{
		Implementation:   ws,
		InitFunc:         wsInit(cfg.Auth, log),
		PayloadReadLimit: &readLimit,
		ErrorFunc: func(_ context.Context, err error) {
			log.Debug("websocket error", "err", err)
		},
		CloseFunc: func(_ context.Context, code int) {
			log.Debug("websocket closed", "code", code)
		},
	})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	queryCache := lru.New[*ast.QueryDocument](QueryCacheSize)
	srv.SetQueryCache(queryCache)
	srv.SetParserTokenLimit(ParserTokenLimit)
	srv.SetErrorPresenter(present)
	srv.SetRecoverFunc(resolvers.RecoverFunc())
	srv.Use(extension.Introspection{})
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](APQCacheSize)})
	// After the persisted query is resolved, before gqlgen parses and validates.
	srv.Use(DocumentLimits{TokenLimit: ParserTokenLimit, Cache: queryCache})
	srv.Use(CostLimit{})
	srv.Use(DepthLimit{Max: MaxQueryDepth})
	if rl := NewRateLimit(cfg.RateLimit, cfg.RateBurst); rl != nil {
		srv.Use(rl)
	}
	srv.Use(resolvers.StreamErrors{Present: present})
	if !cfg.gqlgenEventPages {
		srv.Use(EventPage{})
	}

	return ws.Guard(withConnKey(authenticate(cfg.Auth, log, checkBody(srv))))
}

// checkBody enforces MaxRequestBytes and text validity on POST bodies and GET query
// strings. WebSocket messages are checked by wsgorilla (read limit, UTF-8).
func checkBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") != "":
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
			if !validJSONText(body) {
				writeError(w, http.StatusBadRequest, "request body is not valid UTF-8 or escapes a lone UTF-16 surrogate")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
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
			for _, vs := range q {
				for _, v := range vs {
					if !validJSONText([]byte(v)) {
						writeError(w, http.StatusBadRequest, "query string is not valid UTF-8 or escapes a lone UTF-16 surrogate")
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

// validJSONText reports whether b is valid UTF-8 whose JSON string escapes never
// decode to a lone UTF-16 surrogate. It does not check JSON syntax: malformed JSON is
// left to the decoder.
func validJSONText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(b) && b[i+1] != 'u' {
				i++ // \" \\ \/ \b \f \n \r \t
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				continue // malformed escape: the decoder rejects it
			}
			i += 5
			if !utf16.IsSurrogate(r) {
				continue
			}
			if r >= 0xDC00 {
				return false // a low surrogate with no high one before it
			}
			if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				if r2, ok := hex4(b, i+3); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
					i += 6
					continue
				}
			}
			return false // a high surrogate not followed by a low one
		}
	}
	return true
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
