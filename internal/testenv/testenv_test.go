package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

const probeEnv = "AWARENESS_TESTENV_PROBE"

// The probe TestVisibleWithoutVerbose runs in a child go test.
func TestProbe(t *testing.T) {
	if os.Getenv(probeEnv) == "" {
		t.Skip("run by TestVisibleWithoutVerbose")
	}
	Missing(t, "probe suite", "nothing is missing: this is a probe")
}

// `go test` without -v shows a package's SKIPPED lines, on every run: the run is not
// cached, so the next one says it again instead of "(cached)".
func TestVisibleWithoutVerbose(t *testing.T) {
	if os.Getenv(probeEnv) != "" {
		t.Skip("inside the probe")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not in PATH: %v", err)
	}
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(goTool, "test", "-run", "^TestProbe$", ".")
		cmd.Env = append(withoutCI(os.Environ()), probeEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go test: %v\n%s", err, out)
		}
		want := "./internal/testenv: SKIPPED probe suite: nothing is missing: this is a probe (1 test)\n"
		if !strings.Contains(string(out), want) || strings.Contains(string(out), "(cached)") {
			t.Errorf("run %d of go test without -v printed:\n%s\nwant the line %q and no cached result", run, out, want)
		}
	}
}

func withoutCI(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CI=") {
			out = append(out, kv)
		}
	}
	return out
}
