package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/edge"
)

// Media types of GraphQL over HTTP.
const (
	mediaJSON         = "application/json"
	mediaGraphQLResp  = "application/graphql-response+json"
	allowQueryMethods = "GET, POST, OPTIONS"
)

// httpTransport serves GraphQL over HTTP as the GraphQL-over-HTTP specification asks
// (every MUST and SHOULD of the graphql-http audit suite): POST with a JSON body, GET
// with the parameters in the query string (queries only), the response in the media
// type the Accept header prefers (application/graphql-response+json or
// application/json, the default). A request error (the document does not parse or
// validate, a variable does not coerce) answers 200 under application/json and 400
// under application/graphql-response+json, and never carries a `data` entry. A
// request refused before GraphQL sees it gets the GraphQL error shape with
// extensions.code INVALID_ARGUMENT: 400 for a body that is not JSON (with the byte
// offset, never the body), a batch (a JSON array) or malformed parameters, 405 with
// Allow for a mutation over GET or another method, 406 for an Accept it cannot
// answer, 415 for a body that is not application/json.
//
// gqlgen's own GET and POST transports answer request errors with 422 and `data:
// null`, echo undecodable bodies and refuse other content types without a code, hence
// this transport; execution is still gqlgen's (exec).
type httpTransport struct{}

var _ graphql.Transport = httpTransport{}

// Supports takes every request edge.Of calls HTTP (neither a WebSocket upgrade nor an
// SSE subscription, which sseTransport takes) but a CORS preflight, so that no request
// ends in gqlgen's uncoded "transport not supported".
func (httpTransport) Supports(r *http.Request) bool {
	return edge.Of(r) == edge.HTTP && r.Method != http.MethodOptions
}

// Do implements graphql.Transport.
func (httpTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", allowQueryMethods)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed: send GraphQL as POST (or GET for queries)")
		return
	}
	media, ok := negotiate(r.Header.Get("Accept"))
	if !ok {
		writeError(w, http.StatusNotAcceptable, "cannot answer in any type the Accept header names: accept application/graphql-response+json or application/json")
		return
	}
	start := graphql.Now()
	var (
		params *graphql.RawParams
		err    error
	)
	if r.Method == http.MethodGet {
		params, err = paramsFromQuery(r.URL.RawQuery)
	} else {
		if msg, ok := checkContentType(r); !ok {
			writeError(w, http.StatusUnsupportedMediaType, msg)
			return
		}
		var body []byte
		if body, err = readBody(r); err == nil {
			params, err = paramsFromBody(body)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	ctx := r.Context()
	rc, opErr := exec.CreateOperationContext(ctx, params)
	if opErr != nil {
		status := http.StatusOK
		if media == mediaGraphQLResp && errcode.GetErrorKind(opErr) == errcode.KindProtocol {
			status = http.StatusBadRequest
		}
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, rc), opErr)
		writeResponse(w, media, status, resp, false)
		return
	}
	if r.Method == http.MethodGet {
		if op := rc.Doc.Operations.ForName(rc.OperationName); op != nil && op.Operation != ast.Query {
			w.Header().Set("Allow", "POST")
			writeError(w, http.StatusMethodNotAllowed, "GET runs queries only: send the "+string(op.Operation)+" as POST")
			return
		}
	}
	responses, ctx := exec.DispatchOperation(ctx, rc)
	writeResponse(w, media, http.StatusOK, responses(ctx), true)
}

// negotiate picks the response media type for an Accept header: the first of
// application/graphql-response+json and application/json it names with a non-zero
// quality (*/* and application/* mean application/json), application/json when it is
// empty; ok is false when it names neither.
func negotiate(accept string) (media string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return mediaJSON, true
	}
	best, bestQ := "", 0.0
	for mt, q := range edge.AcceptRanges(accept) {
		var m string
		switch mt {
		case mediaGraphQLResp:
			m = mediaGraphQLResp
		case mediaJSON, "*/*", "application/*":
			m = mediaJSON
		default:
			continue
		}
		if q > bestQ {
			best, bestQ = m, q
		}
	}
	return best, best != ""
}

// checkContentType reports whether a POST carries a JSON body (any charset is read as
// UTF-8) and, when not, the refusal naming the header to send.
func checkContentType(r *http.Request) (string, bool) {
	ct := r.Header.Get("Content-Type")
	if ct == mediaJSON {
		return "", true // the usual spelling, without parsing it
	}
	if ct == "" {
		return "the request has no Content-Type: send Content-Type: application/json with a JSON body {\"query\": …}", false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != mediaJSON {
		return fmt.Sprintf("Content-Type %q is not supported: send Content-Type: application/json with a JSON body {\"query\": …}", ct), false
	}
	return "", true
}

// paramsFromBody decodes a POST body: one JSON object with query (a string),
// operationName (a string or null), variables and extensions (objects or null).
// Errors name the byte offset and never quote the body. The body is decoded once,
// variables and extensions included (numbers as json.Number).
func paramsFromBody(body []byte) (*graphql.RawParams, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return nil, errors.New(`the request body is empty: send a JSON object {"query": …}`)
	case trimmed[0] == '[':
		return nil, errors.New(`batched requests (a JSON array of operations) are not supported: send one operation per request, as a JSON object {"query": …}`)
	}
	var fields map[string]any
	if err := decodeJSON(body, &fields); err != nil {
		return nil, fmt.Errorf("the request body is not a JSON object: %w", err)
	}
	return paramsFrom(fields)
}

// paramsFromQuery reads the GET parameters query, operationName, variables and
// extensions (the last two JSON-encoded).
func paramsFromQuery(rawQuery string) (*graphql.RawParams, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, errors.New("the query string is malformed: encode it as application/x-www-form-urlencoded")
	}
	fields := map[string]any{}
	for _, name := range []string{"query", "operationName"} {
		if v := q.Get(name); v != "" {
			fields[name] = v
		}
	}
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			var value any
			if err := decodeJSON([]byte(v), &value); err != nil {
				return nil, fmt.Errorf("the %s parameter is not JSON: %w", name, err)
			}
			fields[name] = value
		}
	}
	return paramsFrom(fields)
}

// paramsFrom reads the parameters from their decoded JSON values; a null one is
// absent.
func paramsFrom(fields map[string]any) (*graphql.RawParams, error) {
	p := &graphql.RawParams{}
	if err := stringField(fields, "query", &p.Query); err != nil {
		return nil, err
	}
	if err := stringField(fields, "operationName", &p.OperationName); err != nil {
		return nil, err
	}
	if err := objectField(fields, "variables", &p.Variables); err != nil {
		return nil, err
	}
	if err := objectField(fields, "extensions", &p.Extensions); err != nil {
		return nil, err
	}
	if p.Query == "" && p.Extensions["persistedQuery"] == nil {
		return nil, errors.New(`the request has no query: send {"query": "…"} (or a persistedQuery extension)`)
	}
	return p, nil
}

func stringField(fields map[string]any, name string, dst *string) error {
	switch v := fields[name].(type) {
	case nil:
	case string:
		*dst = v
	default:
		return fmt.Errorf("the %s parameter must be a string", name)
	}
	return nil
}

func objectField(fields map[string]any, name string, dst *map[string]any) error {
	switch v := fields[name].(type) {
	case nil:
	case map[string]any:
		*dst = v
	default:
		return fmt.Errorf("the %s parameter must be a JSON object", name)
	}
	return nil
}

// checkedBody is a POST body checkBody read and checked: the transports take its
// bytes instead of reading them a second time.
type checkedBody struct {
	*bytes.Reader
	b []byte
}

func (checkedBody) Close() error { return nil }

// readBody returns the request body, the one checkBody kept when it read it.
func readBody(r *http.Request) ([]byte, error) {
	if cb, ok := r.Body.(checkedBody); ok {
		return cb.b, nil
	}
	return io.ReadAll(r.Body)
}

// decodeJSON decodes exactly one JSON value, numbers as json.Number (as gqlgen's
// transports do, so that Int and Float variables coerce the same way); an error names
// the byte offset, never the input.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return fmt.Errorf("unexpected data after the JSON value at byte %d", dec.InputOffset())
		}
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		return fmt.Errorf("unexpected JSON %s at byte %d", te.Value, te.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the JSON ends early, at byte %d", len(b))
	}
	return errors.New("invalid JSON")
}

// writeResponse writes a GraphQL response in media. A request error (withData false)
// has no `data` entry.
func writeResponse(w http.ResponseWriter, media string, status int, resp *graphql.Response, withData bool) {
	bp := responseBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledResponse {
			responseBufs.Put(bp)
		}
	}()
	var err error
	if withData {
		*bp, err = appendResponse((*bp)[:0], resp)
	} else {
		var b []byte
		b, err = json.Marshal(struct {
			Errors     gqlerror.List  `json:"errors"`
			Extensions map[string]any `json:"extensions,omitempty"`
		}{resp.Errors, resp.Extensions})
		*bp = append((*bp)[:0], b...)
	}
	if err != nil {
		writeCodedError(w, http.StatusInternalServerError, awareness.EINTERNAL, "the response could not be encoded")
		return
	}
	w.Header().Set("Content-Type", media)
	w.WriteHeader(status)
	_, _ = w.Write(*bp)
}

// responseBufs holds the buffers responses are encoded in (net/http copies a body
// out before Write returns); one over maxPooledResponse is left to the collector.
var responseBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledResponse = 256 << 10

// appendResponse appends resp encoded exactly as json.Marshal encodes a
// graphql.Response (errors, data, label, path, hasNext, extensions; empty ones
// omitted but data), without json.Marshal's second pass over data: gqlgen's data is
// already compact JSON, which json.Marshal would only scan again to HTML-escape it.
// appendData does that escaping as it copies.
func appendResponse(b []byte, resp *graphql.Response) ([]byte, error) {
	b = append(b, '{')
	if len(resp.Errors) > 0 {
		e, err := json.Marshal(resp.Errors)
		if err != nil {
			return nil, err
		}
		b = append(b, `"errors":`...)
		b = append(b, e...)
		b = append(b, ',')
	}
	b = append(b, `"data":`...)
	if resp.Data == nil {
		b = append(b, "null"...)
	} else {
		b = appendData(b, resp.Data)
	}
	if resp.Label != "" || len(resp.Path) > 0 || resp.HasNext != nil || len(resp.Extensions) > 0 {
		rest, err := json.Marshal(struct {
			Label      string         `json:"label,omitempty"`
			Path       ast.Path       `json:"path,omitempty"`
			HasNext    *bool          `json:"hasNext,omitempty"`
			Extensions map[string]any `json:"extensions,omitempty"`
		}{resp.Label, resp.Path, resp.HasNext, resp.Extensions})
		if err != nil {
			return nil, err
		}
		b = append(b, ',')
		b = append(b, rest[1:len(rest)-1]...) // the members, without the braces
	}
	return append(b, '}'), nil
}

// appendData appends the JSON text data as json.Marshal writes a json.RawMessage
// (json.Compact with HTML escaping) when data is compact, as gqlgen's output is: the
// escaping alone (json.HTMLEscape), without Compact's pass.
func appendData(b []byte, data []byte) []byte {
	return htmlEscape(append(b, data...), len(b))
}
