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
// FS is served at "/" by a file server; Playground answers "/playground".
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

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
	files := http.FileServerFS(FS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
