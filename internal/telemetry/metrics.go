// Package telemetry is the adapter between the service's core and its operators'
// tools: it implements awareness.Observer with Prometheus metrics, through the
// official Go client, and OpenTelemetry spans, serves /metrics, and traces GraphQL
// operations as a gqlgen extension. The core packages, internal/awareness,
// internal/models and internal/upstream, only call the Observer interface it declares.
package telemetry

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/awareness/awareness/internal/awareness"
)

const namespace = "awareness"

// Config configures a Telemetry.
type Config struct {
	// Registry receives the metrics; nil makes a fresh one, see Telemetry.Registry.
	Registry *prometheus.Registry
	// Tracer starts the store transaction spans; nil traces nothing.
	Tracer trace.Tracer
	// DBSystem is the db.system attribute of store spans: "sqlite" or "postgresql".
	DBSystem string
	// Pending, when set, is read at every scrape for the awareness_notices_pending
	// gauge: the durable count, across every process sharing the database.
	Pending func(ctx context.Context) (int64, error)
	Logger  *slog.Logger
}

// Telemetry implements awareness.Observer with Prometheus metrics and, for store
// transactions, OpenTelemetry spans. It is safe for concurrent use.
type Telemetry struct {
	reg    *prometheus.Registry
	tracer trace.Tracer
	// tracing is false when Config.Tracer was nil: Transaction then starts no span.
	tracing bool
	dbAttr  attribute.KeyValue

	appended     *prometheus.CounterVec
	deduplicated prometheus.Counter
	appendErrors *prometheus.CounterVec

	opened       prometheus.Counter
	delivered    prometheus.Counter
	acknowledged prometheus.Counter
	subscribers  *prometheus.GaugeVec
	dropped      *prometheus.CounterVec

	groupCommit *prometheus.HistogramVec
	txDuration  *prometheus.HistogramVec
	resolutions *prometheus.CounterVec

	reconnects prometheus.Counter
	hints      prometheus.Counter

	upChecks prometheus.Counter
	upEvents prometheus.Counter
	upMisses prometheus.Counter
}

var _ awareness.Observer = (*Telemetry)(nil)

// New registers the service's metrics and the Go runtime and process collectors.
func New(cfg Config) *Telemetry {
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	tracer := cfg.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dbSystem := cfg.DBSystem
	if dbSystem == "" {
		dbSystem = "other_sql"
	}
	t := &Telemetry{reg: reg, tracer: tracer, tracing: cfg.Tracer != nil, dbAttr: attribute.String("db.system", dbSystem)}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}

	t.appended = counterVec("events_appended_total", "Events appended to the signal log, by kind.", "kind")
	t.deduplicated = counterVec("events_deduplicated_total", "Appends answered with the event already recorded under their dedupe key.").WithLabelValues()
	t.appendErrors = counterVec("append_errors_total", "Appends rejected or failed, by error code (extensions.code).", "code")

	t.opened = counter("notices_opened_total", "Stale notices opened (first notices and follow-ups after an acknowledgement).")
	t.delivered = counter("notices_delivered_total", "Notices handed to a staleNotices subscription of this process, pending ones sent at subscribe included.")
	t.acknowledged = counter("notices_acknowledged_total", "Pending notices acknowledged.")
	t.subscribers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "subscribers",
		Help: "Live subscriptions of this process, by stream (notices, events) and transport."}, []string{"stream", "transport"})
	t.dropped = counterVec("subscribers_dropped_total", "Subscriptions dropped because the client did not keep up, by stream.", "stream")

	t.groupCommit = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "store_group_commit_size",
		Help:    "Appends committed together in one shared write transaction (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}, nil)
	t.txDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "store_transaction_duration_seconds",
		Help:    "Duration of store transactions, retries included, by transaction and result (ok, error).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"transaction", "result"})
	t.resolutions = counterVec("store_commit_resolutions_total", "COMMITs whose answer was lost with the connection, by what the server said became of them (committed, aborted, unknown).", "outcome")

	t.reconnects = counter("pg_listener_reconnects_total", "Times the PostgreSQL notice listener lost its connection (LISTEN, or the hint bus) and reconnected, or its bus dropped messages.")
	t.hints = counter("pg_listener_hints_total", "Wake-up hints the PostgreSQL notice listener received (NOTIFY payloads, or hint bus messages).")

	t.upChecks = counter("upstream_checks_total", "Upstream transcripts of adopted sessions checked.")
	t.upEvents = counter("upstream_events_total", "human_direct_message events recorded from upstream transcripts.")
	t.upMisses = counter("upstream_misses_total", "Upstream checks that did not find the transcript.")

	reg.MustRegister(t.appended, t.appendErrors, t.subscribers, t.dropped, t.groupCommit, t.txDuration, t.resolutions,
		t.deduplicated, t.opened, t.delivered, t.acknowledged, t.reconnects, t.hints, t.upChecks, t.upEvents, t.upMisses,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Pending != nil {
		reg.MustRegister(&pendingCollector{read: cfg.Pending, log: log, desc: prometheus.NewDesc(namespace+"_notices_pending",
			"Notices pending (opened, not yet acknowledged) in the database, read at scrape time.", nil, nil)})
	}

	// Every known label value starts at 0, so that rates and alerts see the series
	// before the first event.
	for _, k := range awareness.AllEventKinds {
		t.appended.WithLabelValues(string(k))
	}
	for _, c := range []string{awareness.EINVALID, awareness.ENOTFOUND, awareness.EFORBIDDEN, awareness.EUNAUTHENTICATED,
		awareness.EUNAVAILABLE, awareness.EINTERNAL} {
		t.appendErrors.WithLabelValues(c)
	}
	for _, s := range []string{awareness.StreamNotices, awareness.StreamEvents} {
		t.subscribers.WithLabelValues(s, "websocket")
		t.dropped.WithLabelValues(s)
	}
	for _, o := range []string{"committed", "aborted", "unknown"} {
		t.resolutions.WithLabelValues(o)
	}
	return t
}

// Registry returns the registry the metrics are registered with.
func (t *Telemetry) Registry() *prometheus.Registry { return t.reg }

// Handler serves the metrics in the Prometheus text format. A non-empty token
// requires "Authorization: Bearer <token>", else 401.
func (t *Telemetry) Handler(token string) http.Handler {
	h := promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{Registry: t.reg})
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics need Authorization: Bearer <the token of --metrics-token-file>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Appended implements awareness.Observer.
func (t *Telemetry) Appended(kind awareness.EventKind, deduplicated bool) {
	if deduplicated {
		t.deduplicated.Inc()
		return
	}
	t.appended.WithLabelValues(string(kind)).Inc()
}

// AppendFailed implements awareness.Observer.
func (t *Telemetry) AppendFailed(code string) { t.appendErrors.WithLabelValues(code).Inc() }

// NoticesOpened implements awareness.Observer.
func (t *Telemetry) NoticesOpened(n int) { t.opened.Add(float64(n)) }

// NoticesDelivered implements awareness.Observer.
func (t *Telemetry) NoticesDelivered(n int) { t.delivered.Add(float64(n)) }

// NoticesAcknowledged implements awareness.Observer.
func (t *Telemetry) NoticesAcknowledged(n int) { t.acknowledged.Add(float64(n)) }

// Subscribers implements awareness.Observer.
func (t *Telemetry) Subscribers(stream, transport string, delta int) {
	t.subscribers.WithLabelValues(stream, transport).Add(float64(delta))
}

// SubscriberDropped implements awareness.Observer.
func (t *Telemetry) SubscriberDropped(stream string) { t.dropped.WithLabelValues(stream).Inc() }

// GroupCommit implements awareness.Observer.
func (t *Telemetry) GroupCommit(size int) { t.groupCommit.WithLabelValues().Observe(float64(size)) }

// Transaction implements awareness.Observer: a latency sample and, when tracing, a
// client span "store.<name>". Without a tracer no span is started, not even a no-op
// one, so no span name, attributes or context are built per transaction.
func (t *Telemetry) Transaction(ctx context.Context, name string) (context.Context, func(error)) {
	start := time.Now()
	if !t.tracing {
		return ctx, func(err error) {
			result := "ok"
			if err != nil {
				result = "error"
			}
			t.txDuration.WithLabelValues(name, result).Observe(time.Since(start).Seconds())
		}
	}
	ctx, span := t.tracer.Start(ctx, "store."+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(t.dbAttr, attribute.String("db.operation.name", name)))
	return ctx, func(err error) {
		result := "ok"
		if err != nil {
			result = "error"
			span.SetStatus(codes.Error, awareness.ErrorCode(err))
			span.SetAttributes(attribute.String("error.type", awareness.ErrorCode(err)))
		}
		span.End()
		t.txDuration.WithLabelValues(name, result).Observe(time.Since(start).Seconds())
	}
}

// CommitResolved implements awareness.Observer.
func (t *Telemetry) CommitResolved(outcome string) { t.resolutions.WithLabelValues(outcome).Inc() }

// ListenerReconnect implements awareness.Observer.
func (t *Telemetry) ListenerReconnect() { t.reconnects.Inc() }

// ListenerHint implements awareness.Observer.
func (t *Telemetry) ListenerHint() { t.hints.Inc() }

// UpstreamCycle implements awareness.Observer.
func (t *Telemetry) UpstreamCycle(checked, events, misses int) {
	t.upChecks.Add(float64(checked))
	t.upEvents.Add(float64(events))
	t.upMisses.Add(float64(misses))
}

// pendingCollector reads the pending-notice count from the database at scrape time.
type pendingCollector struct {
	read func(ctx context.Context) (int64, error)
	log  *slog.Logger
	desc *prometheus.Desc
}

// pendingReadTimeout bounds the database read of one scrape.
const pendingReadTimeout = 2 * time.Second

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), pendingReadTimeout)
	defer cancel()
	n, err := c.read(ctx)
	if err != nil {
		// The series is left out of this scrape, for absent() to alert on; the scrape
		// itself succeeds with every other metric.
		c.log.Warn("metrics: reading pending notices", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
