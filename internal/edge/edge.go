// Package edge classifies the requests that reach /query by the transport that serves
// them: a WebSocket handshake, a Server-Sent Events stream, plain GraphQL over HTTP, or
// a request refused for asking to upgrade to anything else. It is the one place that
// reads the Upgrade header and the Accept header's preference for a stream; the graph
// handler, its transports, authentication, the WebSocket adapter, the subscription
// extension and the server's shutdown tracking all ask it. It also holds Hosts, the
// Host allowlist that guards every route against DNS rebinding.
package edge

import (
	"iter"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// Transport is how a request to /query is served.
type Transport uint8

// The transports, as Of decides them.
const (
	// HTTP is GraphQL over HTTP, or a CORS preflight: no Upgrade header, and not an
	// SSE request.
	HTTP Transport = iota
	// WebSocket is a WebSocket handshake: a GET with Upgrade: websocket in any case.
	WebSocket
	// SSE is a Server-Sent Events stream: a POST without an Upgrade header whose
	// Accept prefers text/event-stream.
	SSE
	// Refused is a request with an Upgrade header that is not a WebSocket handshake,
	// by its method or a protocol such as h2c: the handler answers it with 400 before
	// anything else sees it.
	Refused
)

// String returns the transport's name as the service's logs and metrics spell it.
func (t Transport) String() string {
	switch t {
	case HTTP:
		return "http"
	case WebSocket:
		return "websocket"
	case SSE:
		return "sse"
	case Refused:
		return "refused"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// Stream reports whether t opens a long-lived stream, WebSocket or SSE, which the
// server ends itself at shutdown: http.Server.Shutdown would wait for it.
func (t Transport) Stream() bool { return t == WebSocket || t == SSE }

// Of classifies r by its method and its Upgrade and Accept headers.
func Of(r *http.Request) Transport { return classify(r) }

func classify(r *http.Request) Transport {
	if up := r.Header.Get("Upgrade"); up != "" {
		if r.Method == http.MethodGet && strings.EqualFold(up, "websocket") {
			return WebSocket
		}
		return Refused
	}
	if r.Method == http.MethodPost && PrefersEventStream(r.Header.Get("Accept")) {
		return SSE
	}
	return HTTP
}

// Media types the Accept header is compared by.
const (
	mediaEventStream = "text/event-stream"
	mediaJSON        = "application/json"
	mediaGraphQLResp = "application/graphql-response+json"
)

// PrefersEventStream reports whether an Accept header asks for text/event-stream
// above every JSON type. graphql-sse sends only text/event-stream; urql lists it after
// the JSON types, for incremental delivery, and gets JSON. A header that does not
// name event-stream in any case is not parsed: that is every plain GraphQL request.
func PrefersEventStream(accept string) bool {
	return strings.Contains(strings.ToLower(accept), "event-stream") && prefersEventStream(accept)
}

func prefersEventStream(accept string) bool {
	sse, other := -1.0, 0.0
	for mt, q := range AcceptRanges(accept) {
		switch mt {
		case mediaEventStream:
			sse = max(sse, q)
		case mediaJSON, mediaGraphQLResp, "application/graphql+json", "*/*", "application/*":
			other = max(other, q)
		}
	}
	return sse > 0 && sse > other
}

// AcceptRanges yields the media ranges of an Accept header with their quality, 1
// when it gives none, in the header's order, skipping the ranges that do not parse.
func AcceptRanges(accept string) iter.Seq2[string, float64] {
	return func(yield func(string, float64) bool) {
		for part := range strings.SplitSeq(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
			if !yield(mt, q) {
				return
			}
		}
	}
}
