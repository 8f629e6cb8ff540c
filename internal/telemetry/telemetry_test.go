package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/telemetry"
)

// Every metric, after every Observer method was called, passes the client library's
// lint, and each call moves its metric by exactly its amount.
func TestObserverMetricsLintAndCount(t *testing.T) {
	tel := telemetry.New(telemetry.Config{Pending: func(context.Context) (int64, error) { return 7, nil }})
	tel.Appended(awareness.GoalChanged, false)
	tel.Appended(awareness.GoalChanged, true)
	tel.AppendFailed(awareness.EINVALID)
	tel.NoticesOpened(3)
	tel.NoticesDelivered(2)
	tel.NoticesAcknowledged(1)
	tel.Subscribers(awareness.StreamNotices, "websocket", 2)
	tel.Subscribers(awareness.StreamNotices, "websocket", -1)
	tel.SubscriberDropped(awareness.StreamEvents)
	tel.GroupCommit(5)
	_, end := tel.Transaction(context.Background(), "Append")
	end(nil)
	_, end = tel.Transaction(context.Background(), "Append")
	end(errors.New("boom"))
	tel.CommitResolved("committed")
	tel.ListenerReconnect()
	tel.ListenerHint()
	tel.ListenerHint()
	tel.UpstreamCycle(4, 1, 2)

	problems, err := testutil.GatherAndLint(tel.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP awareness_append_errors_total Appends rejected or failed, by error code (extensions.code).
# TYPE awareness_append_errors_total counter
awareness_append_errors_total{code="FORBIDDEN"} 0
awareness_append_errors_total{code="INTERNAL"} 0
awareness_append_errors_total{code="INVALID_ARGUMENT"} 1
awareness_append_errors_total{code="NOT_FOUND"} 0
awareness_append_errors_total{code="UNAUTHENTICATED"} 0
awareness_append_errors_total{code="UNAVAILABLE"} 0
` + appendedSeries(awareness.GoalChanged) + `# HELP awareness_events_deduplicated_total Appends answered with the event already recorded under their dedupe key.
# TYPE awareness_events_deduplicated_total counter
awareness_events_deduplicated_total 1
# HELP awareness_notices_opened_total Stale notices opened (first notices and follow-ups after an acknowledgement).
# TYPE awareness_notices_opened_total counter
awareness_notices_opened_total 3
# HELP awareness_notices_delivered_total Notices handed to a staleNotices subscription of this process, pending ones sent at subscribe included.
# TYPE awareness_notices_delivered_total counter
awareness_notices_delivered_total 2
# HELP awareness_notices_acknowledged_total Pending notices acknowledged.
# TYPE awareness_notices_acknowledged_total counter
awareness_notices_acknowledged_total 1
# HELP awareness_notices_pending Notices pending (opened, not yet acknowledged) in the database, read at scrape time.
# TYPE awareness_notices_pending gauge
awareness_notices_pending 7
# HELP awareness_pg_listener_hints_total Wake-up hints the PostgreSQL notice listener received (NOTIFY payloads, or hint bus messages).
# TYPE awareness_pg_listener_hints_total counter
awareness_pg_listener_hints_total 2
# HELP awareness_pg_listener_reconnects_total Times the PostgreSQL notice listener lost its connection (LISTEN, or the hint bus) and reconnected, or its bus dropped messages.
# TYPE awareness_pg_listener_reconnects_total counter
awareness_pg_listener_reconnects_total 1
# HELP awareness_store_commit_resolutions_total COMMITs whose answer was lost with the connection, by what the server said became of them (committed, aborted, unknown).
# TYPE awareness_store_commit_resolutions_total counter
awareness_store_commit_resolutions_total{outcome="aborted"} 0
awareness_store_commit_resolutions_total{outcome="committed"} 1
awareness_store_commit_resolutions_total{outcome="unknown"} 0
# HELP awareness_subscribers Live subscriptions of this process, by stream (notices, events) and transport.
# TYPE awareness_subscribers gauge
awareness_subscribers{stream="events",transport="websocket"} 0
awareness_subscribers{stream="notices",transport="websocket"} 1
# HELP awareness_subscribers_dropped_total Subscriptions dropped because the client did not keep up, by stream.
# TYPE awareness_subscribers_dropped_total counter
awareness_subscribers_dropped_total{stream="events"} 1
awareness_subscribers_dropped_total{stream="notices"} 0
# HELP awareness_upstream_checks_total Upstream transcripts of adopted sessions checked.
# TYPE awareness_upstream_checks_total counter
awareness_upstream_checks_total 4
# HELP awareness_upstream_events_total human_direct_message events recorded from upstream transcripts.
# TYPE awareness_upstream_events_total counter
awareness_upstream_events_total 1
# HELP awareness_upstream_misses_total Upstream checks that did not find the transcript.
# TYPE awareness_upstream_misses_total counter
awareness_upstream_misses_total 2
`
	names := []string{"awareness_append_errors_total", "awareness_events_appended_total", "awareness_events_deduplicated_total", "awareness_notices_opened_total",
		"awareness_notices_delivered_total", "awareness_notices_acknowledged_total", "awareness_notices_pending",
		"awareness_pg_listener_hints_total", "awareness_pg_listener_reconnects_total", "awareness_store_commit_resolutions_total",
		"awareness_subscribers", "awareness_subscribers_dropped_total", "awareness_upstream_checks_total",
		"awareness_upstream_events_total", "awareness_upstream_misses_total"}
	if err := testutil.GatherAndCompare(tel.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(tel.Registry(), "awareness_store_transaction_duration_seconds"); n != 2 {
		t.Errorf("transaction duration series: %d, want 2 (ok and error)", n)
	}
}

// The token of --metrics-token-file is required when set.
// appendedSeries is the awareness_events_appended_total family as it is exposed after
// one append of kind: a series per kind of the core's table (so its label values),
// sorted by kind.
func appendedSeries(kind awareness.EventKind) string {
	kinds := slices.Clone(awareness.AllEventKinds)
	slices.Sort(kinds)
	var b strings.Builder
	b.WriteString("# HELP awareness_events_appended_total Events appended to the signal log, by kind.\n")
	b.WriteString("# TYPE awareness_events_appended_total counter\n")
	for _, k := range kinds {
		n := 0
		if k == kind {
			n = 1
		}
		fmt.Fprintf(&b, "awareness_events_appended_total{kind=%q} %d\n", k, n)
	}
	return b.String()
}

func TestMetricsHandlerToken(t *testing.T) {
	tel := telemetry.New(telemetry.Config{})
	srv := httptest.NewServer(tel.Handler("secret-secret-secret-secret-secret"))
	defer srv.Close()
	for auth, want := range map[string]int{"": 401, "Bearer wrong": 401, "Bearer secret-secret-secret-secret-secret": 200} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}

// One server span per GraphQL operation, the caller's traceparent its parent, and one
// client span per store transaction under it; without a traceparent the operation
// starts a trace of its own.
func TestTracingSpansFollowTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer(telemetry.TracerName)
	tel := telemetry.New(telemetry.Config{Tracer: tracer, DBSystem: "sqlite"})
	store, err := models.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "a.db"), models.Options{Observer: tel})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := awareness.NewService(awareness.Config{Store: store, Observer: tel})
	h := telemetry.Extract(graph.NewHandler(graph.Config{Service: svc, Extensions: []graphql.HandlerExtension{telemetry.GraphQLTracing{Tracer: tracer}}}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	do := func(query, traceparent string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"query": query})
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out["errors"] != nil {
			t.Fatalf("%s: %v", query, out["errors"])
		}
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	before := len(rec.Ended())
	do(`mutation Record { recordEvent(input:{sessionKey:"agent:main:main", kind: goal_changed, actorType: human}) { recorded } }`,
		"00-"+traceID+"-"+parentID+"-01")

	spans := rec.Ended()[before:]
	var op, tx sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "mutation Record":
			op = s
		case "store.Append":
			tx = s
		}
	}
	if op == nil || tx == nil {
		t.Fatalf("spans %v: want \"mutation Record\" and \"store.Append\"", spanNames(spans))
	}
	if got := op.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("operation trace id %s, want the traceparent's %s", got, traceID)
	}
	if got := op.Parent().SpanID().String(); got != parentID || !op.Parent().IsRemote() {
		t.Errorf("operation parent %s (remote %v), want the traceparent's %s", got, op.Parent().IsRemote(), parentID)
	}
	if op.SpanKind() != trace.SpanKindServer || tx.SpanKind() != trace.SpanKindClient {
		t.Errorf("kinds: operation %v, transaction %v", op.SpanKind(), tx.SpanKind())
	}
	if tx.Parent().SpanID() != op.SpanContext().SpanID() || tx.SpanContext().TraceID().String() != traceID {
		t.Errorf("store.Append parent %s in trace %s, want the operation span %s in %s",
			tx.Parent().SpanID(), tx.SpanContext().TraceID(), op.SpanContext().SpanID(), traceID)
	}

	// No traceparent: a new trace, the operation its root.
	before = len(rec.Ended())
	do(`{ sessionStatus(sessionKey:"agent:main:main", changesSince: 0) { stateVersion } }`, "")
	spans = rec.Ended()[before:]
	var q sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "query" {
			q = s
		}
	}
	if q == nil {
		t.Fatalf("spans %v: want \"query\"", spanNames(spans))
	}
	if q.Parent().IsValid() || q.SpanContext().TraceID().String() == traceID {
		t.Errorf("query without traceparent: parent %v, trace %s; want a root span of a new trace", q.Parent(), q.SpanContext().TraceID())
	}
	var read bool
	for _, s := range spans {
		if s.Name() == "store.ReadChanges" && s.Parent().SpanID() == q.SpanContext().SpanID() {
			read = true
		}
	}
	if !read {
		t.Errorf("spans %v: want store.ReadChanges under the query", spanNames(spans))
	}
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// Tracing is off by default and follows the standard OTEL_* variables.
func TestTracingEnabledByStandardEnvironment(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on, err bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
	} {
		on, err := telemetry.TracingEnabled(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if on != c.on || (err != nil) != c.err {
			t.Errorf("%v: on %v err %v, want on %v err %v", c.env, on, err, c.on, c.err)
		}
	}
}

// BenchmarkTransaction is the observer's cost per store transaction, without a tracer
// (the default) and with one that records nothing.
func BenchmarkTransaction(b *testing.B) {
	for _, c := range []struct {
		name   string
		tracer trace.Tracer
	}{{"tracer=none", nil}, {"tracer=noop", noop.NewTracerProvider().Tracer("")}} {
		b.Run(c.name, func(b *testing.B) {
			tel := telemetry.New(telemetry.Config{Tracer: c.tracer})
			ctx := context.Background()
			b.ReportAllocs()
			for range b.N {
				_, end := tel.Transaction(ctx, "Append")
				end(nil)
			}
		})
	}
}
