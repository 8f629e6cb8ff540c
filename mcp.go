package main

// The Model Context Protocol front of the service (CLT-3, internal/mcpserver):
// streamable HTTP at /mcp on the service's own listener, and `awareness mcp --url URL`,
// a stdio server in front of a running service. Both run every tool as a GraphQL
// operation on the service's /query, with the caller's credentials.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/client"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/mcpserver"
)

// mcpPath is the route of the streamable HTTP MCP endpoint.
const mcpPath = "/mcp"

// mountMCP serves /mcp in front of next on the listener ln: the MCP server reaches
// the service through ln's own /query, forwarding each request's Authorization. With
// --auth-file, a request without a valid token gets 401 before MCP sees it (the same
// tokens as /query; what a token may do is decided by /query, CLT-1). Requests end
// when streams does, like WebSockets. Close the returned server after the HTTP server
// stopped.
func mountMCP(next http.Handler, cfg serveConfig, log *slog.Logger, ln net.Listener, streams context.Context) (http.Handler, *mcpserver.Server, error) {
	c, err := client.New("http://"+selfAddr(ln.Addr())+"/query", client.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	srv := mcpserver.New(mcpserver.Config{Client: c, ForwardAuthorization: true, Logger: log.With("component", "mcp")})
	h := srv.HTTPHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != mcpPath {
			next.ServeHTTP(w, r)
			return
		}
		if cfg.Auth != nil {
			if _, err := cfg.Auth.Authenticate(r.Header.Get("Authorization")); err != nil {
				log.Info("mcp request refused: unauthenticated", "remote", r.RemoteAddr, "reason", err)
				w.Header().Set("WWW-Authenticate", `Bearer realm="awareness"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":%q,"data":{"code":%q}}}`, err.Error(), awareness.EUNAUTHENTICATED)
				return
			}
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(streams, cancel)
		defer stop()
		h.ServeHTTP(w, r.WithContext(ctx))
	}), srv, nil
}

// selfAddr is a dialable address of a listener: an unspecified host becomes loopback.
func selfAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
		if tcp.IP != nil && tcp.IP.To4() == nil {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Port))
}

// mcpCmd runs `awareness mcp`: an MCP server on stdin/stdout in front of a running
// service.
func mcpCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := newFlagSet("mcp")
	fs.SetOutput(stderr)
	url := envFlag(fs, fs.String, "url", "http://127.0.0.1:8080/query", "AWARENESS_URL", "the running service's GraphQL endpoint")
	token := envFlag(fs, fs.String, "token", "", "AWARENESS_TOKEN", "bearer token for the service, when it runs with --auth-file")
	logLevel := envFlag(fs, fs.String, "log-level", "warn", "AWARENESS_LOG_LEVEL", "debug, info, warn or error; logs go to stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: awareness mcp [--url URL] [--token TOKEN]\n\nServe the Model Context Protocol on stdin/stdout, in front of a running service.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if _, err := fs.parse(args, lookupEnv, false); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	level, err := parseLogLevel(*logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "awareness mcp: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := []client.Option{client.WithLogger(log)}
	if t := strings.TrimSpace(*token); t != "" {
		opts = append(opts, client.WithToken(t))
	}
	c, err := client.New(*url, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "awareness mcp: --url: %v\n", err)
		return exitUsage
	}
	srv := mcpserver.New(mcpserver.Config{Client: c, Logger: log.With("component", "mcp")})
	defer srv.Close()
	t := &mcp.IOTransport{Reader: readCloser{stdin}, Writer: writeCloser{stdout}}
	if err := srv.Run(ctx, t); err != nil && ctx.Err() == nil {
		log.Error("mcp", "err", err)
		return exitError
	}
	return exitOK
}

type readCloser struct{ io.Reader }

func (readCloser) Close() error { return nil }

type writeCloser struct{ io.Writer }

func (writeCloser) Close() error { return nil }
