// Package wsresult is the JSON result of one bench/cmd/wsload run: bench/cmd/wsload
// writes it and bench/cmd/benchreport reads it. Latencies are in milliseconds, memory
// in kB (RSS) or bytes (/debug/stats).
package wsresult

import (
	"encoding/json"
	"os"
	"slices"
)

// Result is one wsload run against one server.
type Result struct {
	Mode  string `json:"mode"`
	Subs  int    `json:"subs"`
	Small int    `json:"small"`
	// Pings is true when the service kept its default WebSocket pings (wsload -pings);
	// otherwise it pinged once an hour, as the peers, which send none.
	Pings bool `json:"pings,omitempty"`
	// FrameBytes is the mean size of the notice frames received.
	FrameBytes float64 `json:"frame_bytes"`
	// SetupAppends and SetupSeconds: the service's setup through the API.
	SetupAppends int     `json:"setup_appends,omitempty"`
	SetupSeconds float64 `json:"setup_seconds,omitempty"`
	// RestartReadyMS: restart of the set-up service, process start → /readyz 200.
	RestartReadyMS   float64 `json:"restart_ready_ms,omitempty"`
	CursorsAtRestart int     `json:"cursors_at_restart,omitempty"`
	// RSS of the server: before any client, with -small clients, with -subs clients.
	RSS0KB     int64   `json:"rss0_kb"`
	RSSSmallKB int64   `json:"rss_small_kb"`
	RSS1KB     int64   `json:"rss1_kb"`
	PerSubKB   float64 `json:"per_sub_kb"`
	// Stats are /debug/stats of the server (profserve, the peers) at RSS0 and RSS1.
	Stats0 map[string]float64 `json:"stats0,omitempty"`
	Stats1 map[string]float64 `json:"stats1,omitempty"`
	// ConnectSeconds: dial + init + subscribe of all clients.
	ConnectSeconds float64           `json:"connect_seconds"`
	Phases         map[string]*Phase `json:"phases"`
	L3             *Latency          `json:"l3,omitempty"`
	// ClientsEnded counts subscriptions or connections that ended during the run.
	ClientsEnded int      `json:"clients_ended"`
	FirstEnd     string   `json:"first_end,omitempty"`
	Unexpected   int64    `json:"unexpected_frames"`
	BadFrames    int64    `json:"bad_frames"`
	Errors       []string `json:"errors,omitempty"`
}

// Phase is one measured phase of a run (b_small, b_big, a, a_l3, b_none).
type Phase struct {
	Expected int `json:"expected"`
	Received int `json:"received"`
	Lost     int `json:"lost"`
	Dupes    int `json:"dupes"`
	// Mismatch counts frames whose watcher is not the connection's, or trigger answers
	// that opened a number of notices other than expected.
	Mismatch int `json:"mismatch"`
	// FromCommit is the primary latency: from the first sign, seen from wsload's
	// process, that the append committed — its HTTP answer or the first frame it
	// caused, whichever came first — to the frame read. A lower bound of commit → frame.
	FromCommit Latency `json:"from_commit"`
	// FromResp is from the trigger's HTTP answer (negative when the frame came first);
	// FromSend from the moment the request was sent (includes the commit itself).
	FromResp Latency `json:"from_response"`
	FromSend Latency `json:"from_send"`
	// TriggerMS is the trigger's round trip (recordEvent, or the baseline's POST).
	TriggerMS Latency `json:"trigger"`
	Seconds   float64 `json:"seconds"`
	// ServerCPUMS is the server process's CPU time (user + system) during the phase;
	// CPUPerFrameUS is that per frame received.
	ServerCPUMS   float64 `json:"server_cpu_ms"`
	CPUPerFrameUS float64 `json:"cpu_per_frame_us"`
	// Opened is the sum over the counted rounds of the notices each broadcast trigger's
	// answer says it opened (the service's noticesOpened, a peer's count).
	Opened int `json:"opened,omitempty"`
	// StoreAppendMS is the service's Append transaction per counted trigger, from its
	// /metrics (awareness_store_transaction_duration_seconds): the commit's own time,
	// which must be alike in b_big and b_none for P6's ratio to compare like with like.
	StoreAppendMS Latency `json:"store_append"`
	// SubscribersLeft is, for b_none, the subscriptions the server still counted when
	// the phase began (0: every client had gone).
	SubscribersLeft int `json:"subscribers_left,omitempty"`
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	N      int     `json:"n"`
	Errors int     `json:"errors,omitempty"`
	Min    float64 `json:"min_ms"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// Summarize returns the distribution of ns, durations in nanoseconds. A percentile is
// the sample at that rank (no interpolation); nothing gives the zero Latency.
func Summarize(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	at := func(p int) float64 {
		i := min(len(s)*p/100, len(s)-1)
		return float64(s[i]) / 1e6
	}
	return Latency{N: len(s), Min: float64(s[0]) / 1e6, P50: at(50), P90: at(90), P99: at(99), Max: float64(s[len(s)-1]) / 1e6}
}

// Write writes r to path as indented JSON with a final newline.
func Write(path string, r *Result) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Read reads a result written by Write.
func Read(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Phase returns the named phase, nil when r is nil or did not run it.
func (r *Result) Phase(name string) *Phase {
	if r == nil {
		return nil
	}
	return r.Phases[name]
}
