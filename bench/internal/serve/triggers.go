package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Triggers is the server side of the triggers bench/cmd/wsload drives a peer with in
// -mode baseline:
//
//	POST /notify     {"watcher": i, "target": T}   one notice for subscriber i on T
//	POST /broadcast  {"target": T, "count": n}     one notice on T for subscribers 0..n-1
//
// Each answers {"sent": n}, flushed, before the notices are sent, as the service
// answers recordEvent once committed and its subscribers' frames follow.
type Triggers struct {
	// Notify and Broadcast prepare the notices of one trigger: n is how many will be
	// sent, send sends them after the answer; an error answers 400.
	Notify    func(watcher int, target string) (n int, send func(), err error)
	Broadcast func(target string, count int) (n int, send func(), err error)
}

// Register adds the trigger routes to mux.
func (t Triggers) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /notify", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Watcher int    `json:"watcher"`
			Target  string `json:"target"`
		}
		trigger(w, r, &req, func() (int, func(), error) { return t.Notify(req.Watcher, req.Target) })
	})
	mux.HandleFunc("POST /broadcast", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Target string `json:"target"`
			Count  int    `json:"count"`
		}
		trigger(w, r, &req, func() (int, func(), error) { return t.Broadcast(req.Target, req.Count) })
	})
}

func trigger(w http.ResponseWriter, r *http.Request, req any, prepare func() (int, func(), error)) {
	if err := json.NewDecoder(r.Body).Decode(req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n, send, err := prepare()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"sent":%d}`, n)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if send != nil {
		send()
	}
}
