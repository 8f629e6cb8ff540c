package graph

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/edge"
)

// FuzzParamsFromBody: decoding a request body never panics, and an error never quotes
// the body (a refusal names a byte offset instead): here the body carries a marker no
// error message contains.
func FuzzParamsFromBody(f *testing.F) {
	for _, s := range []string{
		`{"query":"{ __typename }"}`, `{"query":"{ a }","variables":{"x":1},"extensions":{"persistedQuery":{"version":1}}}`,
		`[{"query":"{ a }"}]`, `{"query": 1}`, `{"qeury":"x"}`, `{ "not a JSON`, `{"query":"x"} trailing`, ``, `null`,
		`{"variables":"x","query":"y"}`, `{"operationName":7,"query":"y"}`,
	} {
		f.Add(s)
	}
	const marker = "ZQXJMARKER"
	f.Fuzz(func(t *testing.T, body string) {
		b := []byte(marker + body)
		if p, err := paramsFromBody(b); err != nil {
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "MARKER") {
				t.Fatalf("error quotes the body: %v", err)
			}
		} else if p == nil {
			t.Fatal("nil params without an error")
		}
		if p, err := paramsFromBody([]byte(body)); err == nil && p.Query == "" && p.Extensions["persistedQuery"] == nil {
			t.Fatalf("accepted a body without a query: %q", body)
		}
	})
}

// FuzzNegotiate: Accept parsing never panics, and picks one of the two JSON types
// whenever it accepts.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"", "*/*", "application/json", "application/graphql-response+json, application/json;q=0.9",
		"text/html", "text/event-stream", "application/json;q=0", "a/b;q=x, */*;q=0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		if m, ok := negotiate(accept); ok && m != mediaJSON && m != mediaGraphQLResp {
			t.Fatalf("negotiate(%q) = %q", accept, m)
		}
		_ = edge.PrefersEventStream(accept)
	})
}

// FuzzAppendResponse: a response is written byte for byte as json.Marshal writes a
// graphql.Response (the encoding gqlgen's own transports use), for any compact JSON
// data (gqlgen's is), with or without errors and extensions.
func FuzzAppendResponse(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"s":"<b> & </b>"}`, "{\"s\":\"line\u2028sep\u2029 \\\"<\\\\\"}", ` { "a" : [ 1 , "x y" ] } `,
		`null`, `{"e":"\u003c"}`, "[\"\xe2\x80\xa8\",\"\xe2\x80\"]", `{"a":{"b":[true,false,null,-1.5e3]}}`,
	} {
		f.Add(s, false, false)
		f.Add(s, true, true)
	}
	f.Fuzz(func(t *testing.T, data string, withErrors, withExtensions bool) {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(data)) != nil {
			return // gqlgen's data is valid and compact
		}
		resp := &graphql.Response{Data: compact.Bytes()}
		if withErrors {
			resp.Errors = gqlerror.List{{Message: "bad <" + data + ">", Path: ast.Path{ast.PathName("a"), ast.PathIndex(1)}}}
		}
		if withExtensions {
			resp.Extensions = map[string]any{"code": "X&Y", "n": 1}
			resp.Label = "l"
			resp.Path = ast.Path{ast.PathName("p")}
			more := true
			resp.HasNext = &more
		}
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		got, err := appendResponse(nil, resp)
		if err != nil {
			t.Fatalf("appendResponse: %v", err)
		}
		if string(got) != string(want) {
			t.Fatalf("appendResponse\n got %s\nwant %s", got, want)
		}
	})
}
