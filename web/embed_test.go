package web_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/awareness/awareness/web"
)

// TestFSHoldsTheAssets: every file the pages load is embedded, with its license.
func TestFSHoldsTheAssets(t *testing.T) {
	for _, name := range []string{
		"index.html", "favicon.svg",
		"app/app.js", "app/dom.js", "app/gql.js", "app/live.js", "app/notices.js", "app/style.css",
		"app/views/home.js", "app/views/sessions.js", "app/views/session.js", "app/views/components.js",
		"vendor/graphql-ws/graphql-ws.min.js", "vendor/graphql-ws/LICENSE.md",
		"playground/index.html", "playground/playground.js",
		"playground/vendor/graphiql/graphiql.min.js", "playground/vendor/graphiql/graphiql.min.css", "playground/vendor/graphiql/LICENSE",
		"playground/vendor/react/react.production.min.js", "playground/vendor/react/LICENSE",
		"playground/vendor/react-dom/react-dom.production.min.js", "playground/vendor/react-dom/LICENSE",
	} {
		fi, err := fs.Stat(web.FS, name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Size() == 0 {
			t.Errorf("%s is empty", name)
		}
	}
}

// TestOwnFilesLoadNothingExternal: the hand-written pages and scripts reference no
// absolute URL (the SVG namespace aside), so nothing can leave the server. The
// browser tests check the same at run time, including the vendored files.
func TestOwnFilesLoadNothingExternal(t *testing.T) {
	abs := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(web.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasSuffix(path, "vendor") {
			return fs.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".html") || strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".css")) {
			return nil
		}
		b, err := fs.ReadFile(web.FS, path)
		if err != nil {
			return err
		}
		for _, m := range abs.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" && m != "//www.w3.org" {
				t.Errorf("%s references an absolute URL: %s", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPlayground(t *testing.T) {
	h := web.Playground()
	tests := []struct {
		method, path string
		code         int
		contentType  string
		contains     string
	}{
		{"GET", "/playground", 200, "text/html; charset=utf-8", "/playground/playground.js"},
		{"GET", "/playground/", 200, "text/html; charset=utf-8", "/playground/vendor/graphiql/graphiql.min.js"},
		{"HEAD", "/playground", 200, "text/html; charset=utf-8", ""},
		{"GET", "/playground/playground.js", 200, "text/javascript; charset=utf-8", "createFetcher"},
		{"GET", "/playground/vendor/graphiql/graphiql.min.css", 200, "text/css; charset=utf-8", ".graphiql-container"},
		{"GET", "/vendor/graphql-ws/graphql-ws.min.js", 200, "text/javascript; charset=utf-8", "graphql-transport-ws"},
		{"GET", "/playground/missing.js", 404, "", ""},
		{"POST", "/playground", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.code {
				t.Fatalf("status = %d, want %d", res.StatusCode, tt.code)
			}
			if tt.contentType != "" {
				if got := res.Header.Get("Content-Type"); got != tt.contentType {
					t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
				}
			}
			if tt.contains != "" && !strings.Contains(string(body), tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
			if tt.method == http.MethodHead && len(body) != 0 {
				t.Errorf("HEAD body has %d bytes, want 0", len(body))
			}
		})
	}
}

// TestDashboardServedByFileServer: the dashboard works with the plain file server
// that server.go mounts at "/" over FS.
func TestDashboardServedByFileServer(t *testing.T) {
	srv := httptest.NewServer(http.FileServerFS(web.FS))
	defer srv.Close()
	for path, want := range map[string]string{
		"/":                  `<script type="module" src="/app/app.js">`,
		"/app/app.js":        "parseRoute",
		"/app/style.css":     ".notice",
		"/playground/":       "GraphiQL",
		"/favicon.svg":       "<svg",
		"/app/views/home.js": "homeView",
	} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d, body contains %q: %v", path, res.StatusCode, want, strings.Contains(string(body), want))
		}
		if strings.HasSuffix(path, ".js") {
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
				t.Errorf("GET %s Content-Type = %q; module scripts need a JavaScript MIME type", path, ct)
			}
		}
	}
}

// TestSecureHeaders: every page and file of the dashboard and the playground forbids
// framing (X-Frame-Options DENY and frame-ancestors 'none'), content sniffing and
// foreign scripts; the playground has its own policy (GraphiQL's inline styles).
func TestSecureHeaders(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /playground", web.Playground())
	mux.Handle("/", web.Files())
	for _, tt := range []struct {
		path   string
		status int
		policy string
	}{
		{"/", 200, web.DashboardPolicy},
		{"/index.html", http.StatusMovedPermanently, web.DashboardPolicy},
		{"/app/app.js", 200, web.DashboardPolicy},
		{"/app/style.css", 200, web.DashboardPolicy},
		{"/vendor/graphql-ws/graphql-ws.min.js", 200, web.DashboardPolicy},
		{"/nope", 404, web.DashboardPolicy},
		{"/playground", 200, web.PlaygroundPolicy},
		{"/playground/", 200, web.PlaygroundPolicy},
		{"/playground/playground.js", 200, web.PlaygroundPolicy},
		{"/playground/vendor/graphiql/graphiql.min.css", 200, web.PlaygroundPolicy},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		h := rec.Result().Header
		if rec.Code != tt.status {
			t.Errorf("GET %s = %d, want %d", tt.path, rec.Code, tt.status)
		}
		if got := h.Get("Content-Security-Policy"); got != tt.policy {
			t.Errorf("GET %s: Content-Security-Policy %q, want %q", tt.path, got, tt.policy)
		}
		if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Frame-Options %q, X-Content-Type-Options %q, want DENY and nosniff", tt.path, h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"))
		}
	}
	for _, p := range []string{web.DashboardPolicy, web.PlaygroundPolicy} {
		for _, want := range []string{"frame-ancestors 'none'", "script-src 'self';", "object-src 'none'", "base-uri 'none'"} {
			if !strings.Contains(p, want) {
				t.Errorf("policy %q lacks %q", p, want)
			}
		}
		if strings.Contains(p, "unsafe-eval") || strings.Contains(p, "script-src 'self' 'unsafe-inline'") {
			t.Errorf("policy %q allows inline or evaluated script", p)
		}
	}
}
