package wsresult

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarizeTakesTheSampleAtEachRank(t *testing.T) {
	ns := make([]int64, 100)
	for i := range ns {
		ns[len(ns)-1-i] = int64(i+1) * 1e6 // 100 ms … 1 ms, unsorted
	}
	got := Summarize(ns)
	want := Latency{N: 100, Min: 1, P50: 51, P90: 91, P99: 100, Max: 100}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize (-want +got):\n%s", diff)
	}
	if ns[0] != 100e6 {
		t.Errorf("Summarize sorted its argument: ns[0] = %d", ns[0])
	}
	if got := Summarize(nil); got != (Latency{}) {
		t.Errorf("Summarize(nil) = %+v, want the zero Latency", got)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	want := &Result{
		Mode: "service", Subs: 3, Small: 1, FrameBytes: 412.5, RSS0KB: 10, RSS1KB: 40, PerSubKB: 10,
		Stats0: map[string]float64{"goroutines": 7, "heap_inuse": 1 << 20},
		Phases: map[string]*Phase{"a": {Expected: 3, Received: 2, Lost: 1,
			FromCommit: Latency{N: 2, Min: 0.1, P50: 0.2, P90: 0.2, P99: 0.2, Max: 0.2}, CPUPerFrameUS: 31},
			"b_none": {TriggerMS: Latency{N: 3, P50: 13}, Opened: 30000, StoreAppendMS: Latency{N: 3, P50: 12}, SubscribersLeft: 1}},
		L3:     &Latency{N: 5, Errors: 1, P99: 3},
		Errors: []string{"x"},
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read(Write(r)) (-want +got):\n%s", diff)
	}
	if got.Phase("a") != got.Phases["a"] || got.Phase("b") != nil || (*Result)(nil).Phase("a") != nil {
		t.Error("Phase does not return the named phase, or nil for a missing one")
	}
}

// TestJSONNames pins the names wsload writes and benchreport and bench/run.sh read
// (run.sh greps "frame_bytes").
func TestJSONNames(t *testing.T) {
	r := &Result{Mode: "baseline", Phases: map[string]*Phase{"b_big": {}}}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := Write(path, r); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lat := `{
        "n": 0,
        "min_ms": 0,
        "p50_ms": 0,
        "p90_ms": 0,
        "p99_ms": 0,
        "max_ms": 0
      }`
	want := `{
  "mode": "baseline",
  "subs": 0,
  "small": 0,
  "frame_bytes": 0,
  "rss0_kb": 0,
  "rss_small_kb": 0,
  "rss1_kb": 0,
  "per_sub_kb": 0,
  "connect_seconds": 0,
  "phases": {
    "b_big": {
      "expected": 0,
      "received": 0,
      "lost": 0,
      "dupes": 0,
      "mismatch": 0,
      "from_commit": ` + lat + `,
      "from_response": ` + lat + `,
      "from_send": ` + lat + `,
      "trigger": ` + lat + `,
      "seconds": 0,
      "server_cpu_ms": 0,
      "cpu_per_frame_us": 0,
      "store_append": ` + lat + `
    }
  },
  "clients_ended": 0,
  "unexpected_frames": 0,
  "bad_frames": 0
}
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("Write (-want +got):\n%s", diff)
	}
}
