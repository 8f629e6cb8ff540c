package graph

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// Close codes of a graphql-transport-ws WebSocket refused at connection_init.
const (
	// CloseUnauthenticated: no bearer token, or an unknown one. graphql-ws clients
	// treat it as fatal and do not retry with the same token.
	CloseUnauthenticated = wsgorilla.CloseUnauthorized // 4401
	// CloseForbidden: the header and connection_init name different principals.
	CloseForbidden = 4403
)

// authenticate requires a bearer token when k is set: the one authentication point
// of HTTP. A plain request without a valid token gets 401 with a GraphQL error
// UNAUTHENTICATED; a valid one runs with its awareness.Principal in the context,
// which the Service's authorize checks. A WebSocket upgrade passes: its token may come
// in the header or in the connection_init payload, and wsInit decides. A CORS
// preflight OPTIONS carries no credentials and returns no data.
func authenticate(k *auth.Keyring, log *slog.Logger, next http.Handler) http.Handler {
	if k == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions || edge.Of(r) == edge.WebSocket {
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

// errPrincipalMismatch refuses a connection that presents tokens of different
// principals, in the header and the payload or in two spellings of the payload's key.
var errPrincipalMismatch = errors.New("the connection presents tokens of different principals")

// wsInit authenticates a WebSocket at connection_init: the token, "Bearer <token>",
// comes from the payload's Authorization key in any case, at the top level or in a
// "headers" object, or from the upgrade request's Authorization header. Without a
// valid token, or with any presented token invalid, the connection closes with 4401;
// with tokens of different principals, whichever spelling carries them, 4403: a
// connection is one principal, never the first match of a lookup order (CLT-1). The
// principal then rides in the context of every operation of the connection.
func wsInit(k *auth.Keyring, log *slog.Logger) wsgorilla.InitFunc {
	return func(ctx context.Context, header string, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		if k == nil {
			return ctx, nil, nil
		}
		refuse := func(code int, reason string, err error) (context.Context, *transport.InitPayload, error) {
			log.Info("websocket refused", "close_code", code, "reason", err)
			return ctx, nil, &wsgorilla.InitError{Code: code, Reason: reason, Err: err}
		}
		creds, malformed := initCredentials(payload)
		if header != "" {
			creds = append(creds, header)
		}
		if malformed {
			return refuse(CloseUnauthenticated, "Unauthorized: the bearer token is not valid", auth.ErrBadCredentials)
		}
		if len(creds) == 0 {
			return refuse(CloseUnauthenticated, "Unauthorized: a bearer token is required", auth.ErrNoCredentials)
		}
		var p awareness.Principal
		for i, c := range creds {
			cp, err := k.Authenticate(c)
			if err != nil {
				return refuse(CloseUnauthenticated, "Unauthorized: the bearer token is not valid", auth.ErrBadCredentials)
			}
			if i > 0 && cp != p {
				return refuse(CloseForbidden, "Forbidden: tokens of different principals", errPrincipalMismatch)
			}
			p = cp
		}
		return awareness.WithPrincipal(ctx, p), nil, nil
	}
}

// initCredentials returns every Authorization value of a connection_init payload, the
// key matched case-insensitively at the top level and in the "headers" object some
// clients use. malformed reports a value that is not a string.
func initCredentials(payload transport.InitPayload) (creds []string, malformed bool) {
	scan := func(m map[string]any) {
		for key, v := range m {
			if !strings.EqualFold(key, "authorization") || v == nil {
				continue
			}
			s, ok := v.(string)
			if !ok {
				malformed = true
				continue
			}
			if strings.TrimSpace(s) != "" {
				creds = append(creds, s)
			}
		}
	}
	scan(payload)
	if h, ok := payload["headers"].(map[string]any); ok {
		scan(h)
	}
	return creds, malformed
}
