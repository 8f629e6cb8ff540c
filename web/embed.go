// Package web holds the browser side of the service, embedded in the binary so that it
// works with no internet access:
//
//   - the dashboard (index.html, app/): plain HTML, CSS and JavaScript modules with no
//     build step. It speaks GraphQL to /query, over HTTP POST for queries and
//     mutations and over WebSocket (graphql-transport-ws, vendor/graphql-ws) for the
//     live stateEvents and staleNotices subscriptions. Routing is hash based
//     (#/notices, #/sessions, #/session/<agentId>/<sessionKey>, #/watcher/<key>).
//   - the GraphQL playground (playground/): GraphiQL with React, vendored from npm
//     (see VENDOR.md), served by Playground.
//
// Files serves FS at "/"; Playground answers "/playground". Both send the security
// headers of SecureHeaders with every response.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The Content-Security-Policy of the pages: everything from the service itself, no
// inline or evaluated script, no plugin, no framing (with X-Frame-Options: DENY for
// older browsers), forms posting only here. connect-src 'self' covers /query over
// HTTP and WebSocket (ws: and wss: of the same host). The dashboard sets style
// attributes (style-src-attr); GraphiQL inserts style elements and its stylesheet
// embeds its fonts and icons as data: URLs, so the playground allows inline styles
// and data: fonts.
const (
	DashboardPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; " +
		"img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
		"form-action 'self'; frame-ancestors 'none'"
	PlaygroundPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
		"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
		"form-action 'self'; frame-ancestors 'none'"
)

// SecureHeaders sets the headers every page and file of the dashboard and the
// playground is sent with: the Content-Security-Policy for the page at path (the
// playground's under /playground), X-Frame-Options: DENY (the dashboard keeps an
// admin token in localStorage: no other site may frame it), X-Content-Type-Options:
// nosniff and Referrer-Policy: no-referrer.
func SecureHeaders(h http.Header, path string) {
	policy := DashboardPolicy
	if path == "/playground" || strings.HasPrefix(path, "/playground/") {
		policy = PlaygroundPolicy
	}
	h.Set("Content-Security-Policy", policy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// Files returns the file server of FS with SecureHeaders: the dashboard at "/", its
// scripts, styles and vendored files, and the playground's assets.
func Files() http.Handler {
	files := http.FileServerFS(FS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SecureHeaders(w.Header(), r.URL.Path)
		files.ServeHTTP(w, r)
	})
}

// FS holds the static files, rooted at this directory: index.html, favicon.svg, app/,
// vendor/ and playground/.
//
//go:embed index.html favicon.svg app vendor playground
var FS embed.FS

// playgroundPage is the GraphiQL page inside FS.
const playgroundPage = "playground/index.html"

// Playground returns the handler of the offline GraphiQL playground. It answers
// "/playground" and "/playground/" with the GraphiQL page, which points at /query for
// queries and mutations and at ws(s)://<host>/query for subscriptions, and serves any
// other path from FS (the page's scripts and styles live under /playground/vendor/ and
// /vendor/). Mount it at "GET /playground"; the assets are then served by the "/"
// file server over FS.
func Playground() http.Handler {
	files := Files()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SecureHeaders(w.Header(), r.URL.Path)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/playground" || r.URL.Path == "/playground/" {
			page, err := fs.ReadFile(FS, playgroundPage)
			if err != nil { // cannot happen: the page is embedded
				http.Error(w, "playground page missing", http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			if r.Method == http.MethodGet {
				_, _ = w.Write(page)
			}
			return
		}
		files.ServeHTTP(w, r)
	})
}
