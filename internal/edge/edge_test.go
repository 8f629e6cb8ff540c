package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Every transport by method, Upgrade and Accept: a WebSocket handshake is a GET asking
// for websocket in any case; any other Upgrade is refused whatever the method or
// Accept; SSE is a POST whose Accept prefers text/event-stream over every JSON type;
// everything else is plain HTTP.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		method, upgrade, accept string
		want                    Transport
	}{
		{http.MethodGet, "", "", HTTP},
		{http.MethodPost, "", "", HTTP},
		{http.MethodPost, "", "application/json", HTTP},
		{http.MethodPost, "", "application/graphql-response+json", HTTP},
		{http.MethodOptions, "", "", HTTP},
		{http.MethodPut, "", "text/event-stream", HTTP},
		{http.MethodGet, "", "text/event-stream", HTTP}, // SSE is POST only
		{http.MethodHead, "", "", HTTP},

		{http.MethodGet, "websocket", "", WebSocket},
		{http.MethodGet, "WebSocket", "", WebSocket},
		{http.MethodGet, "WEBSOCKET", "application/json", WebSocket},
		{http.MethodGet, "websocket", "text/event-stream", WebSocket},

		{http.MethodPost, "websocket", "", Refused},
		{http.MethodPost, "websocket", "text/event-stream", Refused},
		{http.MethodGet, "h2c", "", Refused},
		{http.MethodPost, "h2c", "application/json", Refused},
		{http.MethodOptions, "websocket", "", Refused},
		{http.MethodGet, "websocket, h2c", "", Refused},

		{http.MethodPost, "", "text/event-stream", SSE},
		{http.MethodPost, "", "text/event-stream, application/json;q=0.9", SSE},
		{http.MethodPost, "", "application/json;q=0.5, text/event-stream", SSE},
		{http.MethodPost, "", "text/event-stream;charset=utf-8", SSE},
		{http.MethodPost, "", "application/json, text/event-stream", HTTP}, // urql: JSON first
		{http.MethodPost, "", "text/event-stream, */*", HTTP},
		{http.MethodPost, "", "text/event-stream;q=0", HTTP},
		{http.MethodPost, "", "text/event-stream;q=0.5, application/*;q=0.5", HTTP},
		{http.MethodPost, "", "text/html", HTTP},
		{http.MethodPost, "", "text/event-stream;q=x", SSE}, // a malformed q counts as 1
		{http.MethodPost, "", ";;;, text/event-stream", SSE},
	} {
		r := httptest.NewRequest(tc.method, "/query", nil)
		if tc.upgrade != "" {
			r.Header.Set("Upgrade", tc.upgrade)
		}
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		got := Of(r)
		if got != tc.want {
			t.Errorf("%s Upgrade %q Accept %q: got %v, want %v", tc.method, tc.upgrade, tc.accept, got, tc.want)
		}
		if stream := tc.want == WebSocket || tc.want == SSE; got.Stream() != stream {
			t.Errorf("%v.Stream() = %v", got, got.Stream())
		}
	}
}

func TestTransportString(t *testing.T) {
	for tr, want := range map[Transport]string{HTTP: "http", WebSocket: "websocket", SSE: "sse", Refused: "refused", 9: "Transport(9)"} {
		if got := tr.String(); got != want {
			t.Errorf("%d: got %q, want %q", tr, got, want)
		}
	}
}

// The shortcut of PrefersEventStream (no parse without "event-stream") never changes
// its answer.
func FuzzPrefersEventStream(f *testing.F) {
	for _, s := range []string{"", "*/*", "application/json", "text/event-stream", "Text/Event-Stream;q=0.5",
		"TEXT/EVENT-STREAM, application/json;q=0.1", "application/json;q=0, text/event-stream", "text/event-stream;q=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		if got, want := PrefersEventStream(accept), prefersEventStream(accept); got != want {
			t.Fatalf("PrefersEventStream(%q) = %v, the full parse says %v", accept, got, want)
		}
	})
}
