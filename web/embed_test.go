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
