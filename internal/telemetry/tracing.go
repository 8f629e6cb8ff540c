package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the service's spans.
const TracerName = "github.com/awareness/awareness"

// TracingEnabled reports whether the standard OpenTelemetry environment asks for
// traces: OTEL_TRACES_EXPORTER=otlp, or, with it unset, an OTLP endpoint in
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; never with
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Tracing is off by default.
func TracingEnabled(lookupEnv func(string) (string, bool)) (bool, error) {
	get := func(k string) string { v, _ := lookupEnv(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: this service exports traces with otlp only (or none)", exp)
	}
	proto := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: this service exports OTLP over http/protobuf only", proto)
	}
	return true, nil
}

// NewOTLPTracerProvider returns a tracer provider that batches spans to the OTLP/HTTP
// exporter configured by the standard OTEL_EXPORTER_OTLP_* variables, with the
// resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, service.name defaulting
// to "awareness", and the sampler of OTEL_TRACES_SAMPLER. Shut it down to flush.
func NewOTLPTracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("awareness")),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Propagator is the W3C Trace Context propagator: traceparent and tracestate.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Extract continues the trace of the caller: a request's W3C traceparent header becomes
// the parent of the spans the request starts.
func Extract(next http.Handler) http.Handler {
	prop := Propagator()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// GraphQLTracing is a gqlgen extension that starts one server span per GraphQL
// operation, named after its type and name, such as "mutation recordTurn". A
// subscription's span lasts until its stream ends.
type GraphQLTracing struct {
	Tracer trace.Tracer
}

var (
	_ graphql.HandlerExtension     = GraphQLTracing{}
	_ graphql.OperationInterceptor = GraphQLTracing{}
)

// ExtensionName implements graphql.HandlerExtension.
func (GraphQLTracing) ExtensionName() string { return "OpenTelemetryTracing" }

// Validate implements graphql.HandlerExtension.
func (GraphQLTracing) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor.
func (g GraphQLTracing) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	opType, opName := "operation", oc.OperationName
	if oc.Operation != nil {
		opType = string(oc.Operation.Operation)
		if opName == "" {
			opName = oc.Operation.Name
		}
	}
	name := opType
	attrs := []attribute.KeyValue{attribute.String("graphql.operation.type", opType)}
	if opName != "" {
		name += " " + opName
		attrs = append(attrs, attribute.String("graphql.operation.name", opName))
	}
	ctx, span := g.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	subscription := opType == "subscription"
	rh := next(ctx)
	ended := false
	return func(rctx context.Context) *graphql.Response {
		resp := rh(trace.ContextWithSpan(rctx, span))
		if ended {
			return resp
		}
		if resp != nil && len(resp.Errors) > 0 {
			span.SetStatus(codes.Error, resp.Errors[0].Message)
		}
		if !subscription || resp == nil {
			ended = true
			span.End()
		}
		return resp
	}
}
