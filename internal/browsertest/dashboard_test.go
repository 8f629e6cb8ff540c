package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The dashboard's tests: the dashboard never shows stale or wrong state, closes the
// reconcile → acknowledge loop, and shows activity at a glance. Each waits for what
// it checks with a deadline (poll), never a fixed sleep.

// waitJS polls a JavaScript condition until it is true or within passes.
func (b *browser) waitJS(t *testing.T, within time.Duration, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(25*time.Millisecond)))
	if err != nil {
		b.screenshot(t, "timeout")
		t.Fatalf("waited %v for %s: %v", within, cond, err)
	}
}

// str evaluates a JavaScript expression that yields a string.
func (b *browser) str(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// evalJS is an action that runs a JavaScript statement and ignores its value.
func evalJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, tg)
		return err
	})
}

// retryLeftJS defines retryLeft() in the page: the seconds the connection label says
// are left before the next attempt (-1 when it says none).
const retryLeftJS = `window.retryLeft = () => { const m = /retrying in ([0-9.]+)s/.exec(document.querySelector('#conn .conn-label').textContent); return m ? Number(m[1]) : -1; }`

func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// docShot saves the viewport as docs/screenshots/<name>.png when UPDATE_SCREENSHOT=1
// (and as an artifact always).
func (b *browser) docShot(t *testing.T, name string) {
	t.Helper()
	b.saveDoc(t, name, filepath.Join("docs", "screenshots", name+".png"))
}

// docFile saves the viewport as docs/<name>.png when UPDATE_SCREENSHOT=1.
func (b *browser) docFile(t *testing.T, name string) {
	t.Helper()
	b.saveDoc(t, name, filepath.Join("docs", name+".png"))
}

// saveDoc writes the screenshot, re-encoded at the best PNG compression (the README
// carries a dozen of them).
func (b *browser) saveDoc(t *testing.T, name, rel string) {
	t.Helper()
	raw := b.screenshot(t, name)
	if os.Getenv("UPDATE_SCREENSHOT") != "1" || raw == nil {
		return
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	dst := filepath.Join(repoRoot(t), rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d KiB)", dst, len(data)/1024)
}

func cardSel(list, watcher, target string) string {
	return fmt.Sprintf(`%s .notice[data-watcher=%q][data-target=%q]`, list, watcher, target)
}

// ackExact acknowledges one notice from another client (the exact form).
func (s *server) ackExact(t *testing.T, watcher, target string) {
	t.Helper()
	var d struct {
		PendingNotices []struct {
			Target          string `json:"target"`
			TargetAgentID   string `json:"targetAgentId"`
			NotifiedVersion int    `json:"notifiedVersion"`
		} `json:"pendingNotices"`
	}
	s.gql(t, `query($w: String!) { pendingNotices(watcher: $w) { target targetAgentId notifiedVersion } }`, map[string]any{"w": watcher}, &d)
	for _, n := range d.PendingNotices {
		if n.Target == target {
			s.gql(t, `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
				map[string]any{"w": watcher, "n": []any{map[string]any{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion}}}, nil)
			return
		}
	}
	t.Fatalf("no pending notice of %s about %s", watcher, target)
}

const (
	peer1 = "agent:main:subagent:peer-1"
	peer2 = "agent:main:subagent:peer-2"
)

// twoNotices gives manager two pending notices (worker and peer1, spawned by it, each
// changed by a person).
func twoNotices(t *testing.T, srv *server) {
	t.Helper()
	for _, k := range []string{worker, peer1} {
		srv.record(t, map[string]any{"sessionKey": k, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
		srv.record(t, map[string]any{"sessionKey": k, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
	}
}

// TestOutageWhileSessionPageLoadsThenRecovery: a session page opened while the server
// is down says so, once, in the outage banner, and every panel's chip says stale (never
// "live"); once the server is back it reloads by itself, shows the events and goes live
// within the capped backoff, without a reload of the page.
func TestOutageWhileSessionPageLoadsThenRecovery(t *testing.T) {
	b := newBrowser(t)
	addr := freeAddr(t)
	db := filepath.Join(t.TempDir(), "awareness.db")
	srv := startServer(t, addr, db)
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sessions-table tr[data-key]`)))

	t0 := time.Now()
	srv.stop(t)
	t.Logf("stopped in %v", time.Since(t0))
	b.do(t, 10*time.Second, chromedp.WaitNotPresent(chromedp.CSS(`#conn[data-state="connected"]`)))
	t.Logf("disconnected at %v", time.Since(t0))
	// The sessions panel was live: it is now dimmed and says when it was updated.
	b.waitJS(t, 5*time.Second, `document.querySelector('#sessions-panel').dataset.freshness === 'reconnecting'`)
	if chip := b.text(t, `#sessions-panel .freshness`); !strings.HasPrefix(chip, "reconnecting · updated ") {
		t.Errorf("sessions panel chip while down = %q, want reconnecting with the last update", chip)
	}
	// Open a session page while the server is down (a route change: the page stays).
	b.do(t, 5*time.Second, evalJS(`location.hash = '#/session/main/`+worker+`'`))
	b.waitJS(t, 10*time.Second, `!!document.querySelector('#outage[data-outage]:not([hidden])')`)
	for _, id := range []string{"timeline-panel", "watchers-panel", "activity-chart"} {
		b.waitJS(t, 5*time.Second, fmt.Sprintf(`document.getElementById(%q).dataset.freshness === 'stale'`, id))
	}
	if n := b.count(t, `.freshness[data-state="live"]`); n != 0 {
		t.Errorf("%d panels say live while the server is down", n)
	}
	b.screenshot(t, "stale")
	t.Logf("stale at %v", time.Since(t0))

	srv = startServer(t, addr, db)
	ready := time.Now()
	b.do(t, 15*time.Second, chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)))
	live := time.Since(ready)
	t.Logf("connection live %v after the server was ready", live.Round(time.Millisecond))
	if live > 5*time.Second {
		t.Errorf("the page went live %v after the server was back; the backoff should be capped at a few seconds", live)
	}
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#timeline li[data-seq="1"]') && document.querySelector('#outage').hidden`)
	b.waitJS(t, 5*time.Second, `['timeline-panel','watchers-panel','activity-chart','about-panel'].every((id) => document.getElementById(id).dataset.freshness === 'live')`)
	if got := b.str(t, `document.querySelector('section[aria-label="Summary"]').dataset.freshness`); got != "live" {
		t.Errorf("summary freshness = %q, want live (it follows the timeline's load)", got)
	}
	// And it is live: a new event shows without a reload.
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "run_completed", "actorType": "system", "runId": "r1"})
	b.waitJS(t, noticeWithin, `!!document.querySelector('#timeline li[data-seq="2"][data-kind="run_completed"]')`)
}

// TestVisibilityRetriesAtOnce: while the dashboard waits out its (capped) backoff, the
// browser going online, or the tab becoming visible, retries at once: it is live again
// well before the scheduled retry.
func TestVisibilityRetriesAtOnce(t *testing.T) {
	b := newBrowser(t)
	addr := freeAddr(t)
	db := filepath.Join(t.TempDir(), "awareness.db")
	srv := startServer(t, addr, db)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)))
	b.do(t, 2*time.Second, evalJS(retryLeftJS))
	for _, trigger := range []string{`window.dispatchEvent(new Event('online'))`, `document.dispatchEvent(new Event('visibilitychange'))`} {
		for attempt := 1; ; attempt++ {
			srv.stop(t)
			// The backoff grows to its cap (2 to 2.5 s with jitter); wait for a wait
			// that just began.
			b.waitJS(t, 20*time.Second, `document.querySelector('#conn').dataset.state === 'waiting' && retryLeft() >= 1.9`)
			srv = startServer(t, addr, db)
			// More than 1.2 s are left, so being live within 1 s of the event is the
			// immediate retry, not the scheduled one (the server may have been slow to
			// start: then try again).
			if b.str(t, `document.querySelector('#conn').dataset.state + ' ' + (retryLeft() > 1.2)`) != "waiting true" {
				if attempt == 5 {
					t.Fatalf("%s: five server restarts outlasted the backoff; cannot tell an immediate retry", trigger)
				}
				b.waitJS(t, 10*time.Second, `document.querySelector('#conn').dataset.state === 'connected'`)
				continue
			}
			start := time.Now()
			b.do(t, 5*time.Second, evalJS(trigger))
			b.waitJS(t, time.Second, `document.querySelector('#conn').dataset.state === 'connected'`)
			t.Logf("%s: live %v after the event (the scheduled retry was over 1.2 s away)", trigger, time.Since(start).Round(time.Millisecond))
			break
		}
	}
}

// TestAcknowledgeFromAnotherClientDisappears (defect 5, item 2): a notice another
// client acknowledges leaves the dashboard within a second (the closed item of
// staleNotices(includeClosed: true)), on the home page and on the target's page.
func TestAcknowledgeFromAnotherClientDisappears(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, worker))),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, peer1))))
	b.waitJS(t, 5*time.Second, `document.title.startsWith('(2) ')`)

	srv.ackExact(t, manager, worker)
	start := time.Now()
	b.waitJS(t, time.Second, `!document.querySelector(`+js(cardSel("#notice-list", manager, worker))+`)`)
	t.Logf("acknowledged elsewhere: gone after %v", time.Since(start).Round(time.Millisecond))
	if n := b.count(t, cardSel("#notice-list", manager, peer1)); n != 1 {
		t.Errorf("the other notice left too")
	}
	b.waitJS(t, time.Second, `document.title.startsWith('(1) ')`)

	// On the target's page, in "notices about this session".
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+peer1),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#about-notices", manager, peer1))))
	srv.ackExact(t, manager, peer1)
	b.waitJS(t, time.Second, `!document.querySelector(`+js(cardSel("#about-notices", manager, peer1))+`)`)
	b.waitJS(t, time.Second, `!!document.querySelector('#about-notices [data-empty-notices]') && !document.title.startsWith('(')`)
}

// TestUpstreamPanelRefreshes (defect 5): the upstream panel follows the monitor: the
// check that finds a foreign prompt (and opens the notice) shows as checked.
func TestUpstreamPanelRefreshes(t *testing.T) {
	b := newBrowser(t)
	dir := t.TempDir()
	cat := filepath.Join(dir, "claude")
	if err := os.Mkdir(cat, 0o755); err != nil {
		t.Fatal(err)
	}
	transcript := filepath.Join(cat, "t1.jsonl")
	if err := os.WriteFile(transcript, []byte(`{"type":"user","message":{"role":"user","content":"history"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, freeAddr(t), filepath.Join(dir, "awareness.db"),
		"--catalog", "claude="+cat, "--upstream-first-check", "10ms", "--upstream-interval", "1s")
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-upstream-empty]`)))
	const ext = "agent:main:acp:ext"
	srv.gql(t, `mutation { adoptSession(input: {sessionKey: "agent:main:acp:ext", catalogId: "claude", threadId: "t1"}) { marker } }`, nil, nil)
	srv.gql(t, `mutation { watch(input: {watcher: "agent:main:main", target: "agent:main:acp:ext"}) { watched } }`, nil, nil)
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#upstream tr[data-key="agent:main:acp:ext"]')`)
	f, err := os.OpenFile(transcript, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"type":"user","message":{"role":"user","content":"typed in the terminal"}}` + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, ext))))
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#upstream tr[data-key="agent:main:acp:ext"] td[data-checked="1"]')`)
	// Not clipped at 1280 px: the table fits its panel.
	if w := b.eval(t, `(() => { const p = document.querySelector('#upstream'); const t = p.querySelector('table'); return t.scrollWidth - p.clientWidth; })()`); w > 0 {
		t.Errorf("the upstream table is %vpx wider than its panel", w)
	}
}

// TestOfflineAcknowledgeIsQueued (defect 4): an Acknowledge pressed while the server is
// down is queued (the card and the toast say so, truthfully), and sent when the
// server is back: the notice is then acknowledged on the server.
func TestOfflineAcknowledgeIsQueued(t *testing.T) {
	b := newBrowser(t)
	addr := freeAddr(t)
	db := filepath.Join(t.TempDir(), "awareness.db")
	srv := startServer(t, addr, db)
	twoNotices(t, srv)
	card := cardSel("#notice-list", manager, worker)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	srv.stop(t)
	b.do(t, 10*time.Second, chromedp.WaitNotPresent(chromedp.CSS(`#conn[data-state="connected"]`)))
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(card+` button.ack`)))
	b.waitJS(t, 5*time.Second, `!!document.querySelector(`+js(card+`[data-queued="1"]`)+`)`)
	if toast := b.text(t, `#toasts .toast`); !strings.Contains(toast, "queued") {
		t.Errorf("toast = %q, want it to say the acknowledgement is queued", toast)
	}
	b.screenshot(t, "queued")

	srv = startServer(t, addr, db)
	b.waitJS(t, 10*time.Second, `!document.querySelector(`+js(card)+`)`)
	if n := srv.pending(t, manager); n != 1 {
		t.Errorf("pendingNotices(%s) after the queued acknowledgement = %d, want 1 (only peer-1 left)", manager, n)
	}
	b.waitJS(t, 5*time.Second, `[...document.querySelectorAll('#toasts .toast')].some((e) => e.textContent.includes('Sent the queued acknowledgement'))`)
}

// TestKeyboardOnlyAcknowledge (defect 7): Tab reaches Acknowledge, Enter acknowledges,
// and the focus moves to the next notice's Acknowledge (then to the heading), never
// to <body>.
func TestKeyboardOnlyAcknowledge(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#notice-list .notice:nth-child(2)`)))
	for i := 0; ; i++ {
		if b.eval(t, `document.activeElement && document.activeElement.matches('#notice-list button.ack') ? 1 : 0`) == 1 {
			break
		}
		if i > 60 {
			t.Fatalf("60 Tabs did not reach an Acknowledge button (focus on %s)", b.str(t, `document.activeElement.outerHTML.slice(0, 120)`))
		}
		b.do(t, 2*time.Second, chromedp.KeyEvent(kb.Tab))
	}
	first := b.str(t, `document.activeElement.closest('.notice').dataset.target`)
	b.do(t, 2*time.Second, chromedp.KeyEvent(kb.Enter))
	b.waitJS(t, 5*time.Second, `!document.querySelector('#notice-list .notice[data-target=`+js(first)+`]')`)
	b.waitJS(t, 2*time.Second, `document.activeElement.matches('#notice-list button.ack')`)
	b.do(t, 2*time.Second, chromedp.KeyEvent(kb.Enter))
	b.waitJS(t, 5*time.Second, `!document.querySelector('#notice-list .notice')`)
	b.waitJS(t, 2*time.Second, `document.activeElement.id === 'notices-h'`)
	if n := srv.pending(t, manager); n != 0 {
		t.Errorf("pending after two keyboard acknowledgements = %d", n)
	}
}

// TestAuthDialogOnce (defect 6, item 5): under --auth-file a session page's several
// refused requests open one dialog, with a masked input; Cancel leaves a "not
// authorised" state (not the empty state) and the header's Token button opens the
// dialog again; a wrong token asks again; the right one loads the page live.
func TestAuthDialogOnce(t *testing.T) {
	b := newBrowser(t)
	dir := t.TempDir()
	authFile := filepath.Join(dir, "tokens.json")
	const token = "s3cret-admin-token-0123456789abcdef"
	if err := os.WriteFile(authFile, []byte(`{"tokens":[{"name":"ops","role":"admin","token":"`+token+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, freeAddr(t), filepath.Join(dir, "awareness.db"), "--auth-file", authFile)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker),
		chromedp.WaitVisible(chromedp.CSS(`#auth-dialog[open]`)))
	// Let every first request of the page fail and queue behind the one dialog.
	b.waitJS(t, 5*time.Second, `document.querySelector('#conn').dataset.state === 'unauthorised'`)
	if got := b.str(t, `document.querySelector('#auth-dialog').dataset.prompts`); got != "1" {
		t.Errorf("the token dialog opened %s times, want once", got)
	}
	if typ := b.str(t, `document.querySelector('#auth-token').type`); typ != "password" {
		t.Errorf("token input type = %q, want password (masked)", typ)
	}
	b.docShot(t, "auth-dialog-1280")
	b.do(t, 5*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.docShot(t, "auth-dialog-390")
	b.do(t, 5*time.Second, chromedp.EmulateViewport(1280, 860))
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#auth-dialog .auth-cancel`)))
	// Every request queued behind the dialog is refused after Cancel, each panel in its turn.
	b.waitJS(t, 5*time.Second, `!document.querySelector('#auth-dialog[open]') && !!document.querySelector('#outage[data-unauthorised]:not([hidden])') && document.querySelector('#about-panel').dataset.freshness === 'unauthorised' && document.querySelector('#timeline-panel').dataset.freshness === 'unauthorised'`)
	// Said once, for the page: no panel repeats it.
	if n := b.count(t, `[data-unauthorised]`); n != 1 {
		t.Errorf("%d not-authorised banners, want the page's one", n)
	}
	if n := b.count(t, `[data-empty-notices]`); n != 0 {
		t.Errorf("%d notice lists show the empty state although the server refused the page", n)
	}
	if st := b.str(t, `document.querySelector('#timeline-panel').dataset.freshness`); st != "unauthorised" {
		t.Errorf("timeline panel freshness = %q, want unauthorised", st)
	}
	b.docShot(t, "not-authorised-1280")
	b.do(t, 5*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.docShot(t, "not-authorised-390")
	b.do(t, 5*time.Second, chromedp.EmulateViewport(1280, 860))
	if b.str(t, `document.querySelector('#auth-dialog').dataset.prompts`) != "1" {
		t.Error("the dialog opened again after Cancel without being asked")
	}

	// The header reopens it; a wrong token is refused and asks again (once).
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#token-btn`)), chromedp.WaitVisible(chromedp.CSS(`#auth-dialog[open]`)))
	b.do(t, 5*time.Second, chromedp.SendKeys(chromedp.CSS(`#auth-token`), "wrong-token"), chromedp.KeyEvent(kb.Enter))
	b.waitJS(t, 10*time.Second, `!!document.querySelector('#auth-dialog[open]') && document.querySelector('#auth-dialog .auth-msg').textContent.includes('refused')`)
	if got := b.str(t, `document.querySelector('#auth-dialog').dataset.prompts`); got != "3" {
		t.Errorf("dialog opened %s times after the wrong token, want 3 (first, Token button, refusal)", got)
	}
	b.do(t, 5*time.Second, chromedp.SendKeys(chromedp.CSS(`#auth-token`), token), chromedp.KeyEvent(kb.Enter))
	b.do(t, 15*time.Second, chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)))
	b.waitJS(t, 10*time.Second, `!document.querySelector('[data-unauthorised]') && document.querySelector('#outage').hidden && document.querySelector('#timeline-panel').dataset.freshness === 'live'`)
}

// TestSessionsTableErrorAndPageLabel: the sessions table shows the error in place of
// "Loading…", and reloading page 2 keeps its label and its way back.
func TestSessionsTableErrorAndPageLabel(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	for i := range 27 {
		srv.record(t, map[string]any{"sessionKey": fmt.Sprintf("agent:main:subagent:s-%02d", i), "kind": "run_completed", "actorType": "system"})
	}
	rows := `#sessions-table tbody tr[data-key]`
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/sessions?first=25"))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll(`+js(rows)+`).length === 25`)
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`.pager button:nth-child(2)`)))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll(`+js(rows)+`).length === 2`)
	if got := b.text(t, `.pager > span`); got != "Page 2 · 2 sessions" {
		t.Errorf("page label = %q", got)
	}
	b.do(t, 10*time.Second, chromedp.Reload())
	b.waitJS(t, 10*time.Second, `document.querySelectorAll(`+js(rows)+`).length === 2`)
	if got := b.text(t, `.pager > span`); got != "Page 2 · 2 sessions" {
		t.Errorf("page label after a reload = %q, want Page 2 · 2 sessions", got)
	}
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`.pager button:nth-child(1)`)))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll(`+js(rows)+`).length === 25`)

	srv.stop(t)
	b.do(t, 10*time.Second, chromedp.WaitNotPresent(chromedp.CSS(`#conn[data-state="connected"]`)))
	b.do(t, 5*time.Second, evalJS(`location.hash = '#/sessions?kinds=subagent'`))
	b.waitJS(t, 10*time.Second, `!!document.querySelector('#sessions-table tr[data-error]') && !document.querySelector('#outage').hidden && document.querySelector('#sessions-panel').dataset.freshness === 'stale'`)
	if n := b.count(t, `#sessions-table .skeleton`); n != 0 {
		t.Error("the table still says Loading… under the error")
	}
}

// TestReconcileLandsOnAcknowledge (defect 2, item 3): a notice's Reconcile opens the
// target's page on that notice, in "notices about this session", with Acknowledge;
// acknowledging there clears it on the server and in the page's watchers table.
func TestReconcileLandsOnAcknowledge(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv)
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, worker))),
		chromedp.Click(chromedp.CSS(cardSel("#notice-list", manager, worker)+` a.reconcile`)))
	about := cardSel("#about-notices", manager, worker)
	b.do(t, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(about+`.landed`)))
	b.waitJS(t, 2*time.Second, `document.activeElement.matches(`+js(about+` button.ack`)+`)`)
	b.waitJS(t, 5*time.Second, `!!document.querySelector('table[data-cursors="watcher"] tr[data-watcher="agent:main:main"] [data-pending-link]')`)
	if !strings.Contains(b.str(t, `location.hash`), "since=1") {
		t.Errorf("Reconcile opened %s, want the delta since L=1", b.str(t, `location.hash`))
	}
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#timeline .since-mark')`)
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(about+` button.ack`)))
	b.waitJS(t, 5*time.Second, `!document.querySelector(`+js(about)+`)`)
	b.waitJS(t, 5*time.Second, `!!document.querySelector('table[data-cursors="watcher"] tr[data-watcher="agent:main:main"] .badge.ok')`)
	var d struct {
		PendingNotices []struct{ Target string } `json:"pendingNotices"`
	}
	srv.gql(t, `query($w: String!) { pendingNotices(watcher: $w) { target } }`, map[string]any{"w": manager}, &d)
	if len(d.PendingNotices) != 1 || d.PendingNotices[0].Target != peer1 {
		t.Errorf("pending after acknowledging on the target page = %+v, want only %s", d.PendingNotices, peer1)
	}
}

// TestActivityChartDrawsRecordedEvents (item 4): the chart draws the events this test
// records, by kind, on the home page and on a session page, and follows new ones.
func TestActivityChartDrawsRecordedEvents(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	ago := func(d time.Duration) string { return time.Now().Add(-d).UTC().Format(time.RFC3339Nano) }
	for _, in := range []map[string]any{
		{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "occurredAt": ago(40 * time.Minute)},
		{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "occurredAt": ago(20 * time.Minute)},
		{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "occurredAt": ago(20 * time.Minute)},
		{"sessionKey": peer1, "kind": "run_failed", "actorType": "system", "outcome": "error", "occurredAt": ago(5 * time.Minute)},
		{"sessionKey": peer1, "kind": "run_completed", "actorType": "system", "occurredAt": ago(2 * time.Hour)}, // outside the hour
	} {
		srv.record(t, in)
	}
	total := func(kind string) int {
		return int(b.eval(t, `[...document.querySelectorAll('#activity-chart rect.bar[data-kind="`+kind+`"]')].reduce((a, r) => a + Number(r.dataset.count), 0)`))
	}
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#activity-chart svg.chart`)))
	for kind, want := range map[string]int{"child_spawned": 1, "human_direct_message": 2, "run_failed": 1, "run_completed": 0} {
		if got := total(kind); got != want {
			t.Errorf("home chart: %s = %d, want %d", kind, got, want)
		}
	}
	if got := b.text(t, `#activity-chart .legend li[data-kind="human_direct_message"] strong`); got != "2" {
		t.Errorf("legend total = %q", got)
	}
	// Two bars 20 minutes ago stack in one minute; run_failed is a separate, later minute.
	if n := b.count(t, `#activity-chart rect.bar[data-kind="human_direct_message"]`); n != 1 {
		t.Errorf("human_direct_message bars = %d, want 1 (one minute)", n)
	}
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "goal_changed", "actorType": "human", "actorId": "telegram:ana"})
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#activity-chart rect.bar[data-kind="goal_changed"][data-count="1"]')`)
	// Notices opened and acknowledged: marks above the bars.
	srv.record(t, map[string]any{"sessionKey": peer2, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	srv.record(t, map[string]any{"sessionKey": peer2, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana"})
	b.waitJS(t, 5*time.Second, `document.querySelector('#activity-chart .legend li[data-notices="opened"]').dataset.total === '1'`)
	srv.ackExact(t, manager, peer2)
	b.waitJS(t, 5*time.Second, `document.querySelector('#activity-chart .legend li[data-notices="acknowledged"]').dataset.total === '1' && !!document.querySelector('#activity-chart circle.mark.acked[data-count="1"]')`)

	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+peer1), chromedp.WaitVisible(chromedp.CSS(`#activity-chart svg.chart`)))
	b.waitJS(t, 5*time.Second, `document.querySelector('#activity-chart').dataset.freshness === 'live'`)
	if got, want := total("run_failed"), 1; got != want {
		t.Errorf("session chart: run_failed = %d, want %d", got, want)
	}
	if got := total("human_direct_message"); got != 0 {
		t.Errorf("session chart shows %d events of another session", got)
	}
}

// TestWatcherViewBulkAcknowledge (item 4): the watcher view lists everything one
// watcher waits on; Acknowledge selected and Acknowledge all use the exact form.
func TestWatcherViewBulkAcknowledge(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	twoNotices(t, srv)
	srv.record(t, map[string]any{"sessionKey": peer2, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	srv.record(t, map[string]any{"sessionKey": peer2, "kind": "goal_changed", "actorType": "human"})
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#notice-list", manager, peer2))),
		chromedp.Click(chromedp.CSS(cardSel("#notice-list", manager, peer2)+` .notice-head a[href^="#/watcher/"]`)))
	b.waitJS(t, 10*time.Second, `document.querySelectorAll('#watcher-notices .notice').length === 3`)
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#watcher-cursors tr[data-target]').length === 3`)
	b.do(t, 5*time.Second,
		chromedp.Click(chromedp.CSS(cardSel("#watcher-notices", manager, worker)+` input.pick`)),
		chromedp.Click(chromedp.CSS(cardSel("#watcher-notices", manager, peer1)+` input.pick`)),
		chromedp.Click(chromedp.CSS(`#ack-selected`)))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#watcher-notices .notice').length === 1`)
	if n := srv.pending(t, manager); n != 1 {
		t.Errorf("pending after acknowledging two selected = %d, want 1", n)
	}
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#ack-all`)))
	b.waitJS(t, 5*time.Second, `!document.querySelector('#watcher-notices .notice') && !!document.querySelector('#watcher-notices [data-empty-notices]')`)
	if n := srv.pending(t, manager); n != 0 {
		t.Errorf("pending after Acknowledge all = %d", n)
	}
}

// TestLinksFiltersCopyAndTitle (item 4): actor ids and parent/child sessions are
// links, the activity and the timeline filter by kind and actor, the notice text
// copies, the tab title counts the pending notices, and an empty server says how to
// start.
func TestLinksFiltersCopyAndTitle(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#notice-list [data-empty-notices]`)))
	if got := b.text(t, `#notice-list [data-empty-notices]`); !strings.Contains(got, "awareness serve --demo") || !strings.Contains(got, "recordEvent") {
		t.Errorf("empty state = %q, want how to start the demo or record a first event", got)
	}
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#activity-chart [data-chart-empty]')`)

	twoNotices(t, srv)
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "run_failed", "actorType": "system", "outcome": "timeout"})
	b.waitJS(t, noticeWithin, `document.title.startsWith('(2) Notices')`)

	// Copy the notice text.
	card := cardSel("#notice-list", manager, worker)
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(card+` button.copy`)))
	b.waitJS(t, 2*time.Second, `document.querySelector(`+js(card+` button.copy`)+`).dataset.copied === '1'`)

	// What changed: the notice's digest (DIG-1), read when asked for.
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(card+` button.digest`)))
	b.waitJS(t, 5*time.Second, `document.querySelector(`+js(card+` [data-digest]`)+`).textContent.includes('human_direct_message 1')`)
	if got := b.text(t, card+` [data-digest]`); got != "1 event up to 2: human_direct_message 1; human 1; last human channel telegram" {
		t.Errorf("digest line = %q", got)
	}

	// Filter the activity by kind.
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('#activity li[data-seq]').length >= 5`)
	b.do(t, 5*time.Second, chromedp.SetValue(chromedp.CSS(`#af-kind`), "child_spawned"),
		evalJS(`document.querySelector('#af-kind').dispatchEvent(new Event('change'))`))
	b.waitJS(t, 2*time.Second, `[...document.querySelectorAll('#activity li[data-seq]')].every((li) => li.dataset.kind === 'child_spawned') && document.querySelectorAll('#activity li[data-seq]').length === 2`)

	// The session page: the parent is a link (from child_spawned), the acting agent too.
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker), chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="3"]`)))
	b.waitJS(t, 5*time.Second, `!!document.querySelector('[data-fact="parent"] a[href="#/session/main/agent:main:main"]')`)
	if n := b.count(t, `#timeline li[data-kind="child_spawned"] a.actor[href="#/session/main/agent:main:main"]`); n != 1 {
		t.Errorf("the agent actor is not a link to its session")
	}
	// The person is a filter: clicking it keeps only their events.
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(`#timeline li[data-kind="human_direct_message"] button.actor`)))
	b.waitJS(t, 2*time.Second, `document.querySelector('#tf-actor').value === 'telegram:ana' && [...document.querySelectorAll('#timeline li[data-seq]')].every((li) => li.dataset.actor === 'telegram:ana') && document.querySelectorAll('#timeline li[data-seq]').length === 1`)
	b.do(t, 5*time.Second, chromedp.SetValue(chromedp.CSS(`#tf-actor`), ""), chromedp.SetValue(chromedp.CSS(`#tf-kind`), "run_failed"),
		evalJS(`document.querySelector('#tf-kind').dispatchEvent(new Event('change'))`))
	b.waitJS(t, 2*time.Second, `document.querySelectorAll('#timeline li[data-seq]').length === 1 && !!document.querySelector('#timeline li[data-kind="run_failed"]')`)

	// The parent's page lists its children as links.
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+manager))
	b.waitJS(t, 5*time.Second, `document.querySelectorAll('[data-fact="children"] a').length === 2`)
	b.waitJS(t, 5*time.Second, `document.title.startsWith('(2) agent:main:main')`)
}
