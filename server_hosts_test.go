package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// startServe runs serve in-process on a fresh database and a free port with args, and
// returns its base URL; the test's end stops it.
func startServe(t *testing.T, args ...string) (base string, addr string) {
	t.Helper()
	addr = freeAddr(t)
	base = "http://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		run(ctx, append([]string{"serve", "--addr", addr, "--db", filepath.Join(t.TempDir(), "awareness.db")}, args...), io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			t.Errorf("serve did not stop; log:\n%s", stderr.String())
		}
	})
	client := &http.Client{Timeout: 5 * time.Second}
	waitReady(t, client, base, exited)
	client.CloseIdleConnections()
	return base, addr
}

// hostAnswer is what one request to the service with a given Host got.
type hostAnswer struct {
	status int
	code   string // the first error's extensions.code ("" when none)
	data   bool   // the answer holds data (GraphQL data, a stream event, a WebSocket message)
}

// TestForeignHostRefused_DNSRebinding: a page of another site whose name resolves to
// the service (DNS rebinding) sends its own name in Host and Origin; every route and
// every transport (POST, GET, SSE, both WebSocket subprotocols, the dashboard, the
// playground, /metrics, /mcp) refuses it with 403 FORBIDDEN before doing anything,
// while the same requests naming the service's address, localhost or an allowed name
// are answered; the health probes answer every Host.
func TestForeignHostRefused_DNSRebinding(t *testing.T) {
	base, addr := startServe(t, "--allowed-hosts", "awareness.example.com")
	_, port, _ := strings.Cut(addr, ":")
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	const query = `{ sessionsList { sessions { sessionKey } } }`

	httpAsk := func(t *testing.T, method, path, host, accept string, body string) hostAnswer {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
		}
		defer resp.Body.Close()
		a := hostAnswer{status: resp.StatusCode}
		if accept == "text/event-stream" && resp.StatusCode == http.StatusOK {
			// The stream's first event is the query's answer.
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					a.data = strings.Contains(line, `"data"`)
					break
				}
			}
			return a
		}
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Data   json.RawMessage
			Errors []struct{ Extensions map[string]any }
		}
		if json.Unmarshal(raw, &out) == nil {
			a.data = len(out.Data) > 0 && string(out.Data) != "null"
			if len(out.Errors) > 0 {
				a.code, _ = out.Errors[0].Extensions["code"].(string)
			}
		} else {
			a.data = len(raw) > 0 // the dashboard's HTML, /metrics' text
		}
		return a
	}
	wsAsk := func(t *testing.T, protocol, host string) hostAnswer {
		t.Helper()
		d := websocket.Dialer{Subprotocols: []string{protocol}, HandshakeTimeout: 5 * time.Second}
		ws, resp, err := d.Dial("ws://"+addr+"/query", http.Header{"Host": {host}, "Origin": {"http://" + host}})
		if err != nil {
			if resp == nil {
				t.Fatalf("%s (Host %s): %v", protocol, host, err)
			}
			defer resp.Body.Close()
			a := hostAnswer{status: resp.StatusCode}
			var out struct {
				Errors []struct{ Extensions map[string]any }
			}
			if raw, _ := io.ReadAll(resp.Body); json.Unmarshal(raw, &out) == nil && len(out.Errors) > 0 {
				a.code, _ = out.Errors[0].Extensions["code"].(string)
			}
			return a
		}
		defer ws.Close()
		start, next := "subscribe", "next"
		if protocol == "graphql-ws" {
			start, next = "start", "data"
		}
		_ = ws.WriteJSON(map[string]any{"type": "connection_init"})
		_ = ws.WriteJSON(map[string]any{"type": start, "id": "1", "payload": map[string]any{"query": query}})
		_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			var f struct{ Type string }
			if err := ws.ReadJSON(&f); err != nil {
				t.Fatalf("%s (Host %s): %v", protocol, host, err)
			}
			if f.Type == next {
				return hostAnswer{status: http.StatusSwitchingProtocols, data: true}
			}
			if f.Type == "error" {
				return hostAnswer{status: http.StatusSwitchingProtocols}
			}
		}
	}
	post := func(q string) string { b, _ := json.Marshal(map[string]any{"query": q}); return string(b) }
	requests := []struct {
		name string
		ask  func(t *testing.T, host string) hostAnswer
	}{
		{"POST /query", func(t *testing.T, host string) hostAnswer {
			return httpAsk(t, http.MethodPost, "/query", host, "", post(query))
		}},
		{"GET /query", func(t *testing.T, host string) hostAnswer {
			return httpAsk(t, http.MethodGet, "/query?query="+url.QueryEscape(query), host, "", "")
		}},
		{"SSE /query", func(t *testing.T, host string) hostAnswer {
			return httpAsk(t, http.MethodPost, "/query", host, "text/event-stream", post(query))
		}},
		{"graphql-transport-ws", func(t *testing.T, host string) hostAnswer { return wsAsk(t, "graphql-transport-ws", host) }},
		{"graphql-ws", func(t *testing.T, host string) hostAnswer { return wsAsk(t, "graphql-ws", host) }},
		{"dashboard", func(t *testing.T, host string) hostAnswer { return httpAsk(t, http.MethodGet, "/", host, "", "") }},
		{"playground", func(t *testing.T, host string) hostAnswer { return httpAsk(t, http.MethodGet, "/playground", host, "", "") }},
		{"metrics", func(t *testing.T, host string) hostAnswer { return httpAsk(t, http.MethodGet, "/metrics", host, "", "") }},
		{"mcp", func(t *testing.T, host string) hostAnswer {
			return httpAsk(t, http.MethodPost, "/mcp", host, "application/json, text/event-stream",
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		}},
	}
	for _, r := range requests {
		t.Run(r.name, func(t *testing.T) {
			for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port} {
				if got := r.ask(t, host); got.status != http.StatusForbidden || got.code != "FORBIDDEN" || got.data {
					t.Errorf("Host %s: %+v, want 403 FORBIDDEN without data", host, got)
				}
			}
			allowed := []string{addr, "localhost:" + port, "awareness.example.com:" + port}
			if r.name == "mcp" {
				allowed = allowed[:2] // the MCP SDK refuses a name over loopback itself
			}
			for _, host := range allowed {
				if got := r.ask(t, host); got.status >= 400 || got.code != "" || !got.data {
					t.Errorf("Host %s: %+v, want an answer with data", host, got)
				}
			}
		})
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := httpAsk(t, http.MethodGet, path, "evil.example:"+port, "", ""); got.status != http.StatusOK {
			t.Errorf("%s with a foreign Host: %d, want 200 (probes carry no data)", path, got.status)
		}
	}
}
