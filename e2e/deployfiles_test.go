package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/awareness/awareness/internal/testenv"
)

// The systemd units of deploy/systemd (shown in the README) pass systemd-analyze
// verify, and the service's command line serves a socket passed as systemd passes it.
func TestDeployFiles_SystemdUnits(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Missing(t, "systemd units", "systemd-analyze is not installed (Debian: apt-get install -y systemd; .ci/run installs it)")
		return
	}
	dir := t.TempDir()
	var execStart []string
	for _, name := range []string{"awareness.socket", "awareness.service"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				execStart = strings.Fields(v)
			}
		}
		// verify checks that ExecStart's binary exists: the one under test.
		unit := strings.ReplaceAll(string(b), "/usr/local/bin/awareness", serverBin)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "awareness.socket"), filepath.Join(dir, "awareness.service")).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if len(execStart) < 2 || execStart[0] != "/usr/local/bin/awareness" {
		t.Fatalf("ExecStart = %q", execStart)
	}
	// The service's command line, its --db moved into the test's directory, on a socket
	// passed as systemd passes it.
	args := slices.Clone(execStart[1:])
	if i := slices.Index(args, "--db"); i >= 0 && i+1 < len(args) {
		args[i+1] = filepath.Join(t.TempDir(), "awareness.db")
	}
	r := &restarter{t: t, mode: "socket-activation"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if r.sock, err = ln.(*net.TCPListener).File(); err != nil {
		t.Fatal(err)
	}
	defer r.sock.Close()
	s := launchCommand(t, ln.Addr().String(), r.activated(serverBin, args))
	s.waitLog(t, "msg=listening", wait)
	if !strings.Contains(s.logs.String(), "socket=systemd") {
		t.Errorf("the service did not serve the passed socket:\n%s", s.logs.String())
	}
	if code, body := httpGet(t, s, "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
}

// The Kubernetes manifest of deploy/kubernetes (shown in the README) rolls one pod at
// a time with readiness on /readyz and liveness on /healthz, on the container's port,
// gives the drain its time, selects its pods, and its container's command line and
// environment are serve's: run as the manifest says (on a loopback port), the binary
// answers both probes.
func TestDeployFiles_KubernetesManifest(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "awareness.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes/awareness.yaml: %v", err)
		}
		docs[fmt.Sprint(doc["kind"])] = doc
	}
	deploy, service := docs["Deployment"], docs["Service"]
	if deploy == nil || service == nil {
		t.Fatalf("want a Deployment and a Service, have %v", sortedKeys(docs))
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}
	num := func(v any) float64 {
		switch n := v.(type) {
		case uint64:
			return float64(n)
		case int64:
			return float64(n)
		case int:
			return float64(n)
		case float64:
			return n
		}
		t.Fatalf("%v (%T) is not a number", v, v)
		return 0
	}
	spec := get(deploy, "spec")
	if num(get(spec, "replicas")) < 2 || get(spec, "strategy", "type") != "RollingUpdate" ||
		num(get(spec, "strategy", "rollingUpdate", "maxUnavailable")) != 0 || num(get(spec, "strategy", "rollingUpdate", "maxSurge")) < 1 {
		t.Errorf("want two replicas or more, rolled with maxUnavailable 0 and a surge: %v", get(spec, "strategy"))
	}
	pod := get(spec, "template", "spec")
	c := get(pod, "containers", 0)
	if get(c, "readinessProbe", "httpGet", "path") != "/readyz" || get(c, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("probes: readiness %v, liveness %v", get(c, "readinessProbe"), get(c, "livenessProbe"))
	}
	portName := get(c, "ports", 0, "name")
	port := num(get(c, "ports", 0, "containerPort"))
	if get(c, "readinessProbe", "httpGet", "port") != portName || get(c, "livenessProbe", "httpGet", "port") != portName ||
		get(service, "spec", "ports", 0, "targetPort") != portName {
		t.Errorf("the probes and the Service must use the container's port %v", portName)
	}
	labels := fmt.Sprint(get(spec, "template", "metadata", "labels"))
	if fmt.Sprint(get(service, "spec", "selector")) != labels || fmt.Sprint(get(spec, "selector", "matchLabels")) != labels {
		t.Errorf("selectors %v and %v do not select the pods' labels %v", get(service, "spec", "selector"), get(spec, "selector", "matchLabels"), labels)
	}
	var args []string
	for _, a := range get(c, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	flag := func(name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	if _, p, _ := net.SplitHostPort(flag("--addr")); p != fmt.Sprint(port) {
		t.Errorf("--addr %q is not on the containerPort %v", flag("--addr"), port)
	}
	drain, err := time.ParseDuration(flag("--shutdown-timeout"))
	if err != nil {
		t.Fatalf("--shutdown-timeout: %v", err)
	}
	preStop := time.Duration(num(get(c, "lifecycle", "preStop", "sleep", "seconds"))) * time.Second
	if grace := time.Duration(num(get(pod, "terminationGracePeriodSeconds"))) * time.Second; grace < preStop+drain+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v leaves the drain (preStop %v + --shutdown-timeout %v) too little time", grace, preStop, drain)
	}
	env := map[string]bool{}
	for _, e := range get(c, "env").([]any) {
		env[fmt.Sprint(get(e, "name"))] = true
	}
	if !env["AWARENESS_DB"] {
		t.Errorf("the container has no AWARENESS_DB: %v", env)
	}

	// Run as the manifest says, with what its volumes and Secret would provide.
	dir := t.TempDir()
	authFile := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authFile, []byte(`{"tokens":[{"name":"ops","role":"admin","token":"`+strings.Repeat("k", 40)+`"}]}`), 0o400); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	run := slices.Clone(args)
	run[slices.Index(run, "--addr")+1] = addr
	run[slices.Index(run, "--auth-file")+1] = authFile
	cmd := exec.Command(serverBin, run...)
	cmd.Env = append(os.Environ(), "AWARENESS_DB="+filepath.Join(dir, "awareness.db"))
	s := launchCommand(t, addr, cmd)
	s.waitLog(t, "msg=listening", wait)
	for _, probe := range []string{"/readyz", "/healthz"} {
		if code, _ := httpGet(t, s, probe); code != 200 {
			t.Errorf("%s = %d, want 200", probe, code)
		}
	}
}

// launchCommand starts cmd, a server listening on addr, and returns at once (launch
// for a command built by the caller).
func launchCommand(t *testing.T, addr string, cmd *exec.Cmd) *server {
	t.Helper()
	return launch(t, "", serverOpts{addr: addr, wrap: func(string, []string) *exec.Cmd { return cmd }})
}

func httpGet(t *testing.T, s *server, path string) (int, string) {
	t.Helper()
	url := s.base + path
	resp, err := s.client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
