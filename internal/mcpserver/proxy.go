package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/jsontext"
)

// ProxyConfig wires RunProxy.
type ProxyConfig struct {
	// URL is the service's /mcp endpoint; Token its bearer token, "" for none.
	URL   string
	Token string
	// Toolsets and ReadOnly narrow what the service offers; they never widen it.
	Toolsets []string
	ReadOnly bool
	// KeepAlive is the ping cadence that keeps the service's session alive while the
	// stdio client is; DefaultProxyKeepAlive when zero.
	KeepAlive time.Duration
	Logger    *slog.Logger
	Version   string
	// HTTPClient, when set, is used for the service; tests set it.
	HTTPClient *http.Client
}

// DefaultProxyKeepAlive is ProxyConfig.KeepAlive's default: well inside the
// service's idle time.
const DefaultProxyKeepAlive = time.Minute

// RunProxy serves MCP on stdin/stdout in front of a running service's /mcp: a
// client of the service's streamable HTTP endpoint, with one session reopened after
// the service restarted, and a stdio server with the service's tools and notices
// resource, each call forwarded as it is. What a call may do, its answer and its
// refusal are the service's; stdin lines that jsontext finds not valid text are
// refused here, before any decoder could replace a byte, and a URI with a control
// character is refused without ending the process.
func RunProxy(ctx context.Context, cfg ProxyConfig, stdin io.Reader, stdout io.Writer) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultProxyKeepAlive
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &proxy{cfg: cfg, ctx: ctx, subs: map[string]bool{}, announcing: map[string]*announce{}}
	local := mcp.NewServer(&mcp.Implementation{Name: "awareness", Title: "Session state awareness", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions:       instructions,
		Logger:             slog.New(demote{cfg.Logger.Handler()}),
		SubscribeHandler:   p.subscribe,
		UnsubscribeHandler: p.unsubscribe,
	})
	p.local = local
	local.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if prm, ok := req.GetParams().(*mcp.ResourceUpdatedNotificationParams); ok && method == "notifications/resources/updated" {
				p.reached(prm.URI)
			}
			return next(ctx, method, req)
		}
	})
	local.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch prm := req.GetParams().(type) {
			case *mcp.ReadResourceParams:
				if err := checkURI(prm.URI); err != nil {
					return nil, rpcError(err)
				}
			case *mcp.SubscribeParams:
				if err := checkURI(prm.URI); err != nil {
					return nil, rpcError(err)
				}
			case *mcp.UnsubscribeParams:
				if err := checkURI(prm.URI); err != nil {
					return nil, rpcError(err)
				}
			}
			res, err := next(ctx, method, req)
			if err != nil {
				return res, rpcError(err)
			}
			return res, nil
		}
	})
	cs, err := p.session(ctx)
	if err != nil {
		return err
	}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("the service's tools: %w", err)
		}
		if !p.offers(t) {
			continue
		}
		name := t.Name
		local.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return p.callTool(ctx, name, req.Params.Arguments)
		})
	}
	for rt, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			return fmt.Errorf("the service's resources: %w", err)
		}
		local.AddResourceTemplate(rt, p.readResource)
	}
	defer p.close()
	w := &lockedWriter{w: stdout}
	t := &mcp.IOTransport{Reader: io.NopCloser(&textFilter{r: bufio.NewReader(stdin), w: w}), Writer: nopWriteCloser{w}}
	return local.Run(ctx, t)
}

type proxy struct {
	cfg   ProxyConfig
	ctx   context.Context // ends with RunProxy
	local *mcp.Server

	mu   sync.Mutex
	cs   *mcp.ClientSession
	subs map[string]bool // resource URIs the stdio client subscribed to (or is subscribing to)
	// announcing holds, per URI, the update being passed to the stdio client.
	announcing map[string]*announce
}

// announce is the state of one URI's update on its way to the stdio client.
type announce struct {
	again   bool // another update came meanwhile
	reached bool // the stdio server's SDK sent it to a subscription
}

// update passes the service's resources/updated for uri to the stdio client. The
// stdio server's SDK registers a subscription only after the subscribe handler
// returns, and the service may announce before that: an update that reached no
// subscription is sent again every announceRetry, for up to announceFor, while the
// client subscribes to uri.
func (p *proxy) update(uri string) {
	p.mu.Lock()
	if a := p.announcing[uri]; a != nil {
		a.again = true
		p.mu.Unlock()
		return
	}
	a := &announce{again: true}
	p.announcing[uri] = a
	p.mu.Unlock()
	go func() {
		delay, giveUp := announceRetry, time.Now().Add(announceFor)
		for {
			p.mu.Lock()
			if !a.again || !p.subs[uri] || p.ctx.Err() != nil || time.Now().After(giveUp) {
				delete(p.announcing, uri)
				p.mu.Unlock()
				return
			}
			a.again, a.reached = false, false
			p.mu.Unlock()
			_ = p.local.ResourceUpdated(p.ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
			p.mu.Lock()
			if !a.reached {
				a.again = true
				p.mu.Unlock()
				time.Sleep(delay)
				delay = min(2*delay, 200*time.Millisecond)
				continue
			}
			p.mu.Unlock()
		}
	}()
}

// reached is the stdio server's sending middleware's record of an update it sends.
func (p *proxy) reached(uri string) {
	p.mu.Lock()
	if a := p.announcing[uri]; a != nil {
		a.reached = true
	}
	p.mu.Unlock()
}

// offers reports whether the stdio server lists the service's tool t.
func (p *proxy) offers(t *mcp.Tool) bool {
	if p.cfg.ReadOnly && (t.Annotations == nil || !t.Annotations.ReadOnlyHint) {
		return false
	}
	if len(p.cfg.Toolsets) == 0 {
		return true
	}
	set, _ := t.Meta[MetaToolset].(string)
	return slices.Contains(p.cfg.Toolsets, set)
}

// session returns the service session, opening one and resubscribing when there is
// none or the last one ended.
func (p *proxy) session(ctx context.Context) (*mcp.ClientSession, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cs != nil {
		return p.cs, nil
	}
	hc := p.cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if p.cfg.Token != "" {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c := *hc
		c.Transport = bearerTransport{token: p.cfg.Token, next: base}
		hc = &c
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "awareness-mcp", Version: p.cfg.Version}, &mcp.ClientOptions{
		KeepAlive: p.cfg.KeepAlive,
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			go p.update(req.Params.URI) // never waits on p.mu, which session holds while it subscribes
		},
		Logger: slog.New(demote{p.cfg.Logger.Handler()}),
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.cfg.URL, HTTPClient: hc, MaxRetries: 2}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", p.cfg.URL, err)
	}
	for uri := range p.subs {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			p.cfg.Logger.Warn("resubscribe after reconnecting", "uri", uri, "err", err)
		}
	}
	p.cs = cs
	go p.watch(cs)
	return cs, nil
}

// watch waits for the service session to end, because the service restarted or its
// pings failed: the next call opens a new one, and while the stdio client holds
// subscriptions a new one is opened at once, retried with backoff, so that its
// notifications go on.
func (p *proxy) watch(cs *mcp.ClientSession) {
	_ = cs.Wait()
	p.mu.Lock()
	if p.cs == cs {
		p.cs = nil
	}
	resubscribe := len(p.subs) > 0
	p.mu.Unlock()
	for delay := 100 * time.Millisecond; resubscribe && p.ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(delay):
		}
		if _, err := p.session(p.ctx); err == nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	cs := p.cs
	p.cs = nil
	p.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// forward runs one call on the service session. A JSON-RPC error is the service's
// answer, except the refusal of a session the service no longer has because it
// restarted or the session expired: the call did not run, so it runs once more on a
// new session. Any other failure drops the session, for the next call to open
// another, and reads UNAVAILABLE, never retried: the call may have run.
func forward[T any](ctx context.Context, p *proxy, call func(*mcp.ClientSession) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		cs, err := p.session(ctx)
		if err != nil {
			p.cfg.Logger.Warn("mcp proxy: service unreachable", "url", p.cfg.URL, "err", err)
			return zero, rpcError(awareness.Errorf(awareness.EUNAVAILABLE, "the awareness service at %s did not answer; retry later", p.cfg.URL))
		}
		res, err := call(cs)
		if err == nil {
			return res, nil
		}
		je, ok := errors.AsType[*jsonrpc.Error](err)
		if attempt == 0 && (errors.Is(err, mcp.ErrSessionMissing) || (ok && isNoSession(je))) {
			p.drop(cs)
			continue
		}
		if ok {
			return zero, je
		}
		return zero, p.failed(cs, err)
	}
}

// isNoSession reports Handler's refusal of an unknown session id.
func isNoSession(je *jsonrpc.Error) bool {
	var d struct{ Code string }
	return je.Code == codeRefused && json.Unmarshal(je.Data, &d) == nil && d.Code == awareness.ENOTFOUND
}

func (p *proxy) drop(cs *mcp.ClientSession) {
	p.mu.Lock()
	if p.cs == cs {
		p.cs = nil
		go cs.Close()
	}
	p.mu.Unlock()
}

// failed drops the session after a call failed without an answer.
func (p *proxy) failed(cs *mcp.ClientSession, err error) error {
	p.cfg.Logger.Warn("mcp proxy: call failed", "err", err)
	p.drop(cs)
	return rpcError(awareness.Errorf(awareness.EUNAVAILABLE, "the awareness service at %s did not answer; the call may or may not have run: check before you retry", p.cfg.URL))
}

func (p *proxy) callTool(ctx context.Context, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return forward(ctx, p, func(cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	})
}

func (p *proxy) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return forward(ctx, p, func(cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
		return cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
	})
}

func (p *proxy) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	p.mu.Lock()
	had := p.subs[uri]
	p.subs[uri] = true // before the service's first update
	p.mu.Unlock()
	_, err := forward(ctx, p, func(cs *mcp.ClientSession) (struct{}, error) {
		return struct{}{}, cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	})
	if err != nil && !had {
		p.mu.Lock()
		delete(p.subs, uri)
		p.mu.Unlock()
	}
	return err
}

func (p *proxy) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	p.mu.Lock()
	delete(p.subs, req.Params.URI)
	p.mu.Unlock()
	_, err := forward(ctx, p, func(cs *mcp.ClientSession) (struct{}, error) {
		return struct{}{}, cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: req.Params.URI})
	})
	return err
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// textFilter passes stdin's lines to the SDK, refusing a line that jsontext finds
// not valid text with a JSON-RPC error of its own: the SDK's decoder would replace
// the bytes with U+FFFD (ERR-3).
type textFilter struct {
	r    *bufio.Reader
	w    *lockedWriter
	rest []byte
}

func (f *textFilter) Read(b []byte) (int, error) {
	for len(f.rest) == 0 {
		line, err := f.r.ReadBytes('\n')
		if len(line) > 0 {
			if jsontext.Valid(line) {
				f.rest = line
			} else {
				f.refuse(line)
			}
		}
		if err != nil {
			if len(f.rest) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(b, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

// refuse answers an invalid line with INVALID_ARGUMENT, for its id when the line has
// one that can be read.
func (f *textFilter) refuse(line []byte) {
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(bytes.ToValidUTF8(line, nil), &msg)
	id := msg.ID
	if len(id) == 0 || !jsontext.Valid(id) {
		id = json.RawMessage("null")
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": codeInvalidParams, "message": jsontext.Message, "data": map[string]string{"code": awareness.EINVALID}}})
	_, _ = f.w.Write(append(body, '\n'))
}

// lockedWriter makes each Write whole: the SDK's and the filter's answers never
// interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
