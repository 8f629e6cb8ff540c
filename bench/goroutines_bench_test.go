package bench

import (
	"context"
	"runtime/metrics"
	"testing"
)

// BenchmarkAppendGoroutines counts the goroutines started per append
// (goroutines/op, from runtime/metrics) by Service.RecordEvent from one writer under
// a cancellable context, as a request's is: log-only (impl=svc) and notifying
// (impl=svc-notify) events.
func BenchmarkAppendGoroutines(b *testing.B) {
	for _, be := range backends {
		for _, notify := range []bool{false, true} {
			name := "impl=svc"
			if notify {
				name = "impl=svc-notify"
			}
			b.Run(name+"/db="+be.name, func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				svc, _ := newService(be.fresh(b).store(b))
				if _, err := svc.RecordEvent(ctx, recordInput(0, notify)); err != nil {
					b.Fatal(err)
				}
				sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
				metrics.Read(sample)
				before := sample[0].Value.Uint64()
				b.ResetTimer()
				for i := range b.N {
					if _, err := svc.RecordEvent(ctx, recordInput(i, notify)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				metrics.Read(sample)
				b.ReportMetric(float64(sample[0].Value.Uint64()-before)/float64(b.N), "goroutines/op")
			})
		}
	}
}
