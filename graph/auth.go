package graph

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// Close codes of a WebSocket refused at connection_init (graphql-transport-ws).
const (
	// CloseUnauthenticated: no bearer token, or an unknown one. graphql-ws clients
	// treat it as fatal (no retry with the same token).
	CloseUnauthenticated = wsgorilla.CloseUnauthorized // 4401
	// CloseForbidden: the header and connection_init name different principals.
	CloseForbidden = 4403
)

// headerAuthKey carries the Authorization header of a WebSocket upgrade to wsInit.
type headerAuthKey struct{}

// authenticate requires a bearer token when k is set (the one authentication point of
// HTTP). A plain request without a valid token gets 401 with a GraphQL error
// UNAUTHENTICATED; a valid one runs with its awareness.Principal in the context,
// which the Service's authorize checks. A WebSocket upgrade passes: its token may come
// in the header or in the connection_init payload, and wsInit decides. OPTIONS (CORS
// preflight) carries no credentials and returns no data.
func authenticate(k *auth.Keyring, log *slog.Logger, next http.Handler) http.Handler {
	if k == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			ctx := context.WithValue(r.Context(), headerAuthKey{}, r.Header.Get("Authorization"))
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		if r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		p, err := k.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			log.Info("request refused: unauthenticated", "remote", r.RemoteAddr, "reason", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="awareness"`)
			writeCodedError(w, http.StatusUnauthorized, awareness.EUNAUTHENTICATED, err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(awareness.WithPrincipal(r.Context(), p)))
	})
}

// errPrincipalMismatch refuses a connection whose header and connection_init payload
// carry tokens of different principals.
var errPrincipalMismatch = errors.New("the Authorization header and the connection_init payload carry tokens of different roles")

// wsInit authenticates a WebSocket at connection_init: the token comes from the
// payload's Authorization (or authorization) key, "Bearer <token>", or from the
// upgrade request's Authorization header. Without a valid token the connection closes
// with 4401; with two tokens of different principals, 4403. The principal then rides
// in the context of every operation of the connection.
func wsInit(k *auth.Keyring, log *slog.Logger) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		if k == nil {
			return ctx, nil, nil
		}
		refuse := func(code int, reason string, err error) (context.Context, *transport.InitPayload, error) {
			log.Info("websocket refused", "close_code", code, "reason", err)
			ctx = transport.WithWebsocketCloseCode(ctx, code)
			ctx = transport.AppendCloseReason(ctx, reason)
			return ctx, nil, err
		}
		header, _ := ctx.Value(headerAuthKey{}).(string)
		fromPayload := payload.Authorization()
		if header == "" && fromPayload == "" {
			return refuse(CloseUnauthenticated, "Unauthorized: a bearer token is required", auth.ErrNoCredentials)
		}
		var hp, pp awareness.Principal
		var herr, perr error
		if header != "" {
			hp, herr = k.Authenticate(header)
		}
		if fromPayload != "" {
			pp, perr = k.Authenticate(fromPayload)
		}
		if herr != nil || perr != nil {
			return refuse(CloseUnauthenticated, "Unauthorized: the bearer token is not valid", auth.ErrBadCredentials)
		}
		p := hp
		if fromPayload != "" {
			p = pp
			if header != "" && hp != pp {
				return refuse(CloseForbidden, "Forbidden: two tokens of different roles", errPrincipalMismatch)
			}
		}
		return awareness.WithPrincipal(ctx, p), nil, nil
	}
}
