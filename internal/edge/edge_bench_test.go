package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkOf is the classifier's cost on the common request, a POST with a JSON
// Accept header; "full-parse" is one check with the Accept header always parsed (what
// the SSE transport's check cost each request before the classifier), for a ratio
// measured in the same run.
func BenchmarkOf(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/query", nil)
	r.Header.Set("Accept", "application/graphql-response+json, application/json")
	b.Run("classifier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Of(r) != HTTP {
				b.Fatal("not HTTP")
			}
		}
	})
	b.Run("full-parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r.Method == http.MethodPost && r.Header.Get("Upgrade") == "" && prefersEventStream(r.Header.Get("Accept")) {
				b.Fatal("SSE")
			}
		}
	})
}
