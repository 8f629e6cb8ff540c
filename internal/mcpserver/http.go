package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/jsontext"
)

// HTTPConfig wires Handler.
type HTTPConfig struct {
	// Authenticate returns the principal of an Authorization header; nil serves
	// without authentication: every caller is admin, and all share the limits.
	Authenticate func(authorization string) (awareness.Principal, error)
	// OriginAllowed decides a request's Origin header by the /query rule; nil allows
	// no Origin but the request's own host.
	OriginAllowed func(origin, host string) bool
	// MaxBodyBytes bounds a POST body: the /query limit.
	MaxBodyBytes int64
	// HostChecked says the server checks Host in front of every route with
	// edge.Hosts. The SDK's own rule, that a loopback listener serves loopback Host
	// names only, is then off, so that a name --allowed-hosts allows is served on a
	// loopback listener too.
	HostChecked bool
}

// Handler serves streamable HTTP (CLT-6), behind the server's Host allowlist. Each
// refusal is a JSON-RPC error whose data.code is an ERR-1 code; in this order:
//
//   - the Origin rule: 403 FORBIDDEN;
//   - authentication: 401 UNAUTHENTICATED, with WWW-Authenticate;
//   - a session id that is not one of this token's sessions: 404 NOT_FOUND, as for an
//     unknown id, so it learns nothing;
//   - a POST body over MaxBodyBytes: 413 INVALID_ARGUMENT; not JSON or, by jsontext,
//     not valid text: 400 INVALID_ARGUMENT;
//   - a JSON-RPC batch of more than MaxBatchMessages messages: 413
//     COMPLEXITY_LIMIT_EXCEEDED;
//   - a new session past MaxSessions: 429 RATE_LIMITED.
//
// Then the SDK's handler binds the session to the token through its
// auth.TokenInfo.UserID, a hash of the token, closes it after SessionIdle without a
// request, and, unless HostChecked, refuses a non-loopback Host on a loopback
// listener; its plain-text refusals get a code too.
func (s *Server) Handler(hc HTTPConfig) http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              slog.New(demote{s.log.Handler()}),
		SessionTimeout:      s.cfg.SessionIdle,
		MaxRequestBodyBytes: hc.MaxBodyBytes,
		// One Host rule: the server's when it has one.
		DisableLocalhostProtection: hc.HostChecked,
	})
	h := &httpHandler{s: s, hc: hc, next: sdk}
	if hc.Authenticate != nil {
		verify := func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
			c, ok := r.Context().Value(callerKey{}).(caller)
			if !ok {
				return nil, auth.ErrInvalidToken
			}
			return tokenInfo(c.owner, c.p), nil
		}
		h.next = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sdk)
	}
	return h
}

type httpHandler struct {
	s    *Server
	hc   HTTPConfig
	next http.Handler
}

type callerKey struct{}

// caller is an authenticated request's token: owner identifies it, never as the
// token itself; p is its principal.
type caller struct {
	owner string
	p     awareness.Principal
}

// sessionHeader is the streamable HTTP session header.
const sessionHeader = "Mcp-Session-Id"

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(origin, r.Host) {
		writeRPCError(w, http.StatusForbidden, awareness.EFORBIDDEN, "origin "+strconv.Quote(origin)+" may not call this service: start it with --allowed-origins naming the origin")
		return
	}
	owner := ""
	if h.hc.Authenticate != nil {
		p, err := h.hc.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			h.s.log.Info("mcp request refused: unauthenticated", "remote", r.RemoteAddr, "reason", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="awareness"`)
			writeRPCError(w, http.StatusUnauthorized, awareness.EUNAUTHENTICATED, err.Error())
			return
		}
		owner = tokenOwner(r.Header.Get("Authorization"))
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller{owner, p}))
	}
	id := r.Header.Get(sessionHeader)
	if id != "" && !h.s.ownedBy(id, owner) {
		writeRPCError(w, http.StatusNotFound, awareness.ENOTFOUND, noSession)
		return
	}
	if r.Method == http.MethodPost {
		body, ok := h.readBody(w, r)
		if !ok {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if id == "" {
			if err := h.s.roomForSession(owner); err != nil {
				code, msg := coded(err)
				writeRPCError(w, httpStatusOf(code), code, msg)
				return
			}
		}
	}
	cw := &codedWriter{ResponseWriter: w}
	h.next.ServeHTTP(cw, r)
	cw.finish()
	if r.Method == http.MethodDelete && cw.status == http.StatusNoContent {
		h.s.dropEnded() // the session ended: its feeds go now
	}
}

// noSession is the answer for a session id that is unknown, ended, or another token's.
const noSession = "no MCP session has this Mcp-Session-Id (it ended, expired after its idle time, or was never opened with this token): start a new session with initialize"

func (h *httpHandler) originAllowed(origin, host string) bool {
	if h.hc.OriginAllowed != nil {
		return h.hc.OriginAllowed(origin, host)
	}
	return strings.EqualFold(strings.TrimPrefix(strings.TrimPrefix(origin, "http://"), "https://"), host)
}

// readBody reads and checks a POST body; false when it answered the request.
func (h *httpHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := h.hc.MaxBodyBytes
	if limit <= 0 {
		limit = mcp.DefaultMaxRequestBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeRPCError(w, http.StatusRequestEntityTooLarge, awareness.EINVALID, "request body is larger than "+byteSize(limit))
			return nil, false
		}
		writeRPCError(w, http.StatusBadRequest, awareness.EINVALID, "could not read the request body")
		return nil, false
	}
	if !jsontext.Valid(body) {
		writeRPCError(w, http.StatusBadRequest, awareness.EINVALID, jsontext.Message)
		return nil, false
	}
	trimmed := bytes.TrimSpace(body)
	if !json.Valid(trimmed) {
		writeRPCError(w, http.StatusBadRequest, awareness.EINVALID, "the request body is not JSON: send one JSON-RPC message")
		return nil, false
	}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			writeRPCError(w, http.StatusBadRequest, awareness.EINVALID, "the request body is not a JSON-RPC batch")
			return nil, false
		}
		if len(batch) > MaxBatchMessages {
			writeRPCError(w, http.StatusRequestEntityTooLarge, awareness.ECOMPLEXITY,
				"a JSON-RPC batch may hold at most "+strconv.Itoa(MaxBatchMessages)+" messages; this one holds "+strconv.Itoa(len(batch))+": send them in several requests")
			return nil, false
		}
	}
	return body, true
}

func byteSize(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// tokenOwner identifies a token without keeping it: a hash of the credential.
func tokenOwner(authorization string) string {
	tok := strings.TrimSpace(authorization)
	if f := strings.Fields(tok); len(f) == 2 && strings.EqualFold(f[0], "bearer") {
		tok = f[1]
	}
	sum := sha256.Sum256([]byte(tok))
	return "token:" + hex.EncodeToString(sum[:16])
}

// ownedBy reports whether the session id is one of owner's, or unknown here, for
// the SDK to answer. Another owner's session reads as unknown.
func (s *Server) ownedBy(id, owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.byID[id]; st != nil {
		return st.owner == owner
	}
	return true
}

// httpStatusOf is the HTTP status of a refusal before the SDK.
func httpStatusOf(code string) int {
	switch code {
	case awareness.ERATELIMITED:
		return http.StatusTooManyRequests
	case awareness.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case awareness.EFORBIDDEN:
		return http.StatusForbidden
	case awareness.EUNAUTHENTICATED:
		return http.StatusUnauthorized
	case awareness.ENOTFOUND:
		return http.StatusNotFound
	case awareness.EINTERNAL:
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// writeRPCError answers a request refused before the SDK: a JSON-RPC error with the
// ERR-1 code in data.code.
func writeRPCError(w http.ResponseWriter, status int, code, msg string) {
	rc := codeRefused
	if code == awareness.EINVALID || code == awareness.ECOMPLEXITY {
		rc = -32600 // invalid request
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": rc, "message": msg, "data": map[string]string{"code": code}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// codedWriter rewrites the SDK's plain-text http.Error refusals as coded JSON-RPC
// errors. Everything else passes through, streams included.
type codedWriter struct {
	http.ResponseWriter
	status  int
	rewrite bool
	text    bytes.Buffer
}

func (c *codedWriter) WriteHeader(status int) {
	c.status = status
	if status >= 400 && strings.HasPrefix(c.Header().Get("Content-Type"), "text/plain") {
		c.rewrite = true
		return
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *codedWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.rewrite {
		return c.text.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

func (c *codedWriter) Flush() {
	if !c.rewrite {
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (c *codedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *codedWriter) finish() {
	if !c.rewrite {
		return
	}
	c.Header().Del("Content-Type")
	c.Header().Del("X-Content-Type-Options")
	msg := strings.TrimSpace(c.text.String())
	var code string
	switch c.status {
	case http.StatusNotFound, http.StatusForbidden:
		// An unknown session and another token's read the same: this is the SDK's own
		// binding check, should ownedBy not have answered.
		c.status, code, msg = http.StatusNotFound, awareness.ENOTFOUND, noSession
	case http.StatusUnauthorized:
		code = awareness.EUNAUTHENTICATED
	case http.StatusRequestEntityTooLarge:
		code = awareness.EINVALID
	default:
		code = awareness.EINVALID
		if c.status >= 500 {
			code, msg = awareness.EINTERNAL, "internal error"
		}
	}
	writeRPCError(c.ResponseWriter, c.status, code, sanitize(msg))
}
