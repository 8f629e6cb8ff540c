package graph_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/models"
)

// measureEnv is the /query handler of the measurements: the tokens of the
// authorization matrix and the default budget, called in process.
type measureEnv struct {
	h   http.Handler
	svc *awareness.Service
}

func newMeasureEnv(t *testing.T) *measureEnv {
	t.Helper()
	k, err := auth.Parse([]byte(`{"tokens":[{"name":"admin","role":"admin","token":"` + mxAdmin + `"},{"name":"ops","role":"agent:ops","token":"` + mxOpsTok + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := models.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := budget.New(budget.DefaultLimits())
	svc := awareness.NewService(awareness.Config{Store: store, Streams: b})
	t.Cleanup(func() {
		svc.Hub().Close()
		store.Close()
	})
	return &measureEnv{h: graph.NewHandler(graph.Config{Service: svc, Auth: k, Budget: b}), svc: svc}
}

// seedEvents records n events in sessions of agent, from 32 writers (group commits).
func seedEvents(tb testing.TB, svc *awareness.Service, agent string, n int) {
	tb.Helper()
	var wg sync.WaitGroup
	const writers = 32
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += writers {
				if _, err := svc.RecordEvent(context.Background(), awareness.RecordInput{
					SessionKey: fmt.Sprintf("agent:%s:subagent:s%d", agent, i%100), Kind: awareness.RunCompleted, ActorType: awareness.ActorSystem,
				}); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// loadAverage is the 1-minute load average, for the logs of timings.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
