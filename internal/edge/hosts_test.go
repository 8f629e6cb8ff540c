package edge_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/awareness/awareness/internal/edge"
)

func TestHostsAllowed(t *testing.T) {
	h, err := edge.NewHosts("svc.internal:8080", []string{"dash.example.com", "*.corp.example", " Gateway.Example. "})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.1", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"10.1.2.3:9000", true}, // an IP: never a rebinding page's
		{"[2001:db8::1]:80", true},
		{"localhost:8080", true},
		{"LOCALHOST.:8080", true},
		{"app.localhost:8080", true},
		{"svc.internal:8080", true},
		{"svc.internal", true},
		{"dash.example.com", true},
		{"gateway.example:1", true},
		{"a.corp.example:8080", true},
		{"a.b.corp.example", true},
		{"corp.example", false}, // *.name is the names under it
		{"evil.example:8080", false},
		{"localhost.evil.example", false},
		{"evilcorp.example", false},
		{"", false},
		{"svc.internal:port", false},
	}
	for _, tt := range tests {
		if got := h.Allowed(tt.host); got != tt.want {
			t.Errorf("Allowed(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	var none *edge.Hosts
	if !none.Allowed("evil.example") {
		t.Error("a nil Hosts refused a host")
	}
	all, _ := edge.NewHosts("127.0.0.1:8080", []string{"*"})
	if !all.Allowed("evil.example:8080") {
		t.Error(`"*" refused a host`)
	}
	for _, bad := range []string{"http://x.example", "x.example:8080", "x.example/path", "*", "*x.example", "*.", ""} {
		if bad == "*" {
			continue
		}
		if _, err := edge.NewHosts("127.0.0.1:8080", []string{bad}); err == nil {
			t.Errorf("NewHosts accepted the pattern %q", bad)
		}
	}
	// An unspecified listen address adds nothing but IPs, which pass anyway.
	h, _ = edge.NewHosts("0.0.0.0:8080", nil)
	if h.Allowed("evil.example:8080") || !h.Allowed("192.168.1.5:8080") || !h.Allowed("localhost:8080") {
		t.Error("0.0.0.0: want IPs and localhost only")
	}
}

func TestHostsGuard(t *testing.T) {
	h, _ := edge.NewHosts("127.0.0.1:8080", nil)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("data")) })
	g := h.Guard(next, "/healthz")
	for _, tt := range []struct {
		path, host string
		status     int
	}{
		{"/query", "127.0.0.1:8080", 200},
		{"/query", "evil.example:8080", 403},
		{"/", "evil.example:8080", 403},
		{"/healthz", "evil.example:8080", 200},
	} {
		req := httptest.NewRequest(http.MethodGet, tt.path, nil)
		req.Host = tt.host
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s Host %s: %d, want %d", tt.path, tt.host, rec.Code, tt.status)
		}
		if tt.status == 403 {
			var body struct {
				Errors []struct {
					Message    string
					Extensions map[string]any
				}
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Errors) != 1 || body.Errors[0].Extensions["code"] != "FORBIDDEN" {
				t.Errorf("%s Host %s: body %s, want one FORBIDDEN error", tt.path, tt.host, rec.Body)
			}
		}
	}
}
