package awareness

import "context"

// Observer is told what the service, its store, the PostgreSQL listener and the
// upstream monitor do, for metrics and traces. The core declares it and calls it;
// internal/telemetry implements it with Prometheus and OpenTelemetry, so the core
// imports no metrics or tracing library. Every method is called on the hot path: it
// must be cheap and must not block. Embed NopObserver to implement only some methods.
type Observer interface {
	// Write path: one call per append, after its commit; deduplicated appends return
	// an existing event (SIG-4).
	Appended(kind EventKind, deduplicated bool)
	// AppendFailed is one rejected or failed append, by error code.
	AppendFailed(code string)

	// Notice path.
	NoticesOpened(n int)
	// NoticesDelivered counts notices handed to a subscription's stream after repeat
	// suppression, pending ones sent at subscribe included.
	NoticesDelivered(n int)
	NoticesAcknowledged(n int)
	// Subscribers moves by delta the number of live subscriptions of a stream,
	// "notices" or "events", over a transport named by WithTransport.
	Subscribers(stream, transport string, delta int)
	// SubscriberDropped is one subscription dropped for falling behind.
	SubscriberDropped(stream string)

	// Database.
	// GroupCommit is one shared append transaction of size appends.
	GroupCommit(size int)
	// Transaction starts one store transaction named name, such as "Append"; the
	// returned function ends it with its error. The returned context carries it as a
	// trace span.
	Transaction(ctx context.Context, name string) (context.Context, func(error))
	// CommitResolved is one COMMIT whose answer was lost and whose outcome was asked
	// of the server: "committed", "aborted" or "unknown".
	CommitResolved(outcome string)

	// PostgreSQL notice listener.
	ListenerReconnect()
	ListenerHint()

	// Upstream monitor: one cycle's counts of links checked, human_direct_message
	// events recorded and checks that did not find the transcript.
	UpstreamCycle(checked, events, misses int)
}

// NopObserver ignores everything; it is the default Observer.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) Appended(EventKind, bool)        {}
func (NopObserver) AppendFailed(string)             {}
func (NopObserver) NoticesOpened(int)               {}
func (NopObserver) NoticesDelivered(int)            {}
func (NopObserver) NoticesAcknowledged(int)         {}
func (NopObserver) Subscribers(string, string, int) {}
func (NopObserver) SubscriberDropped(string)        {}
func (NopObserver) GroupCommit(int)                 {}
func (NopObserver) CommitResolved(string)           {}
func (NopObserver) ListenerReconnect()              {}
func (NopObserver) ListenerHint()                   {}
func (NopObserver) UpstreamCycle(int, int, int)     {}
func (NopObserver) Transaction(ctx context.Context, _ string) (context.Context, func(error)) {
	return ctx, func(error) {}
}

// ObserverOr returns o, or NopObserver when o is nil.
func ObserverOr(o Observer) Observer {
	if o == nil {
		return NopObserver{}
	}
	return o
}

// TransportUnknown labels subscriptions whose client names no transport.
const TransportUnknown = "other"
