package browsertest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard never shows another state than the service: for an agent-role token
// (CLT-1), after a deletion, after a restart on other data, and during an outage.

const (
	adminTok = "dash-admin-0123456789abcdef0123456789ab"
	opsTok   = "gw-ops-0123456789abcdef0123456789abcdef"
	opsMain  = "agent:ops:main"
	opsChild = "agent:ops:subagent:w"
)

// authFile writes an auth file with the admin token "dash" and the agent:ops token
// "gw-ops" and returns its path.
func authFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.json")
	doc := `{"tokens":[{"name":"dash","role":"admin","token":"` + adminTok + `"},{"name":"gw-ops","role":"agent:ops","token":"` + opsTok + `"}]}`
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// useToken stores token as the dashboard does and opens route with it.
func (b *browser) useToken(t *testing.T, srv *server, token, route string) {
	t.Helper()
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/favicon.svg"))
	b.do(t, 5*time.Second, evalJS(`localStorage.setItem('awareness.token', `+strconv.Quote(token)+`)`))
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+route), chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="connected"]`)))
}

// shots saves the view at 1280 px and at 390 px (as a phone), checking that it fits
// the phone's width, and returns to 1280 px. ready, when set, is waited for after
// each resize.
func (b *browser) shots(t *testing.T, name, ready string) {
	t.Helper()
	b.do(t, 2*time.Second, evalJS(calm))
	b.docShot(t, name+"-1280")
	b.do(t, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	if ready != "" {
		b.waitJS(t, 10*time.Second, ready)
	}
	if overflow := b.eval(t, `document.documentElement.scrollWidth - window.innerWidth`); overflow > 1 {
		t.Errorf("%s: the page is %vpx wider than a 390px screen", name, overflow)
	}
	b.do(t, 2*time.Second, evalJS(calm))
	b.docShot(t, name+"-390")
	b.do(t, 10*time.Second, chromedp.EmulateViewport(1280, 860))
}

// calm takes off what is for people watching (arrival highlights, toasts) before a
// screenshot.
const calm = `document.querySelectorAll('.fresh, .updated').forEach((e) => e.classList.remove('fresh', 'updated')); document.querySelectorAll('#toasts .toast').forEach((e) => e.remove())`

// allLive is true when the page has panels and every one of them is live.
const allLive = `document.querySelectorAll('.freshness').length > 0 && [...document.querySelectorAll('.freshness')].every((c) => c.dataset.state === 'live')`

// TestAgentTokenSeesItsOwn_CLT1: with an agent-role token every view works within what
// the token may read, and says what it cannot: the notices panel is live with the
// agent's one pending notice (not "0 pending"), the tab title counts it, the watcher
// page lists it beside its cursor marked "notice pending" (never "needs the admin
// role"), the sessions, tree, stale and history views show the agent's own, and
// another agent's session page says once that the token may not read it.
func TestAgentTokenSeesItsOwn_CLT1(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"), "--auth-file", authFile(t))
	srv.token = adminTok
	for _, k := range [][2]string{{opsMain, opsChild}, {manager, worker}} {
		srv.record(t, map[string]any{"sessionKey": k[0], "kind": "goal_changed", "actorType": "human", "actorId": "telegram:ana"})
		srv.record(t, map[string]any{"sessionKey": k[1], "kind": "child_spawned", "actorType": "agent", "actorId": k[0], "watchers": []string{k[0]}})
		srv.record(t, map[string]any{"sessionKey": k[1], "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
	}

	b.useToken(t, srv, opsTok, "/#/")
	card := cardSel("#notice-list", opsMain, opsChild)
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(card)))
	b.waitJS(t, 10*time.Second, allLive)
	if n := b.count(t, `#notice-list .notice`); n != 1 {
		t.Errorf("the agent's notice list shows %d notices, want its 1", n)
	}
	if got := b.text(t, `#notices .count`); got != "1" {
		t.Errorf("pending count = %q, want 1", got)
	}
	b.waitJS(t, 5*time.Second, `document.title.startsWith('(1) ')`)
	b.waitJS(t, 5*time.Second, `document.querySelector('#viewer-chip').textContent === 'agent:ops · gw-ops'`)
	if !strings.Contains(b.text(t, `[data-agent-scope]`), "agent ops only") {
		t.Errorf("the page does not say what the token cannot see: %q", b.text(t, `[data-agent-scope]`))
	}
	b.shots(t, "agent-token", allLive)

	// The watcher page: the notice beside its cursor, nothing "needs the admin role".
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/watcher/"+opsMain),
		chromedp.WaitVisible(chromedp.CSS(cardSel("#watcher-notices", opsMain, opsChild))))
	b.waitJS(t, 10*time.Second, `!!document.querySelector('#watcher-cursors tr[data-target="`+opsChild+`"] .badge.wake') && `+allLive)
	if body := b.text(t, `main`); strings.Contains(body, "admin role") || strings.Contains(body, "Not authorised") {
		t.Errorf("the agent's own watcher page says it is not authorised:\n%s", body)
	}

	// Sessions, tree, who is stale: the agent's own.
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/sessions"), chromedp.WaitVisible(chromedp.CSS(`#sessions-table tr[data-key]`)))
	b.waitJS(t, 5*time.Second, allLive)
	if got := b.str(t, `[...document.querySelectorAll('#sessions-table tbody tr[data-key]')].map((r) => r.dataset.agent).join(',')`); got != "ops,ops" {
		t.Errorf("the agent's sessions list shows agents %q, want ops,ops", got)
	}
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/tree"), chromedp.WaitVisible(chromedp.CSS(`#tree details .node[data-key="`+opsMain+`"]`)))
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#tree details ul .node[data-key="`+opsChild+`"]')`)
	if n := b.count(t, `#tree .node[data-agent="main"]`); n != 0 {
		t.Errorf("the agent's tree shows %d sessions of agent main", n)
	}
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/stale"), chromedp.WaitVisible(chromedp.CSS(`#stale-watchers tr[data-watcher="`+opsMain+`"]`)))
	if n := b.count(t, `#stale-watchers tr[data-watcher]`); n != 1 {
		t.Errorf("who is stale lists %d watchers for the agent, want its 1", n)
	}

	// Acknowledge it: the history names the token and the dashboard.
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/"), chromedp.WaitVisible(chromedp.CSS(card)))
	b.do(t, 5*time.Second, chromedp.Click(chromedp.CSS(card+` button.ack`)))
	b.waitJS(t, 5*time.Second, `!document.querySelector(`+js(card)+`) && !!document.querySelector('#notice-list [data-empty-notices]')`)
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/acks"), chromedp.WaitVisible(chromedp.CSS(`#ack-history tr[data-watcher="`+opsMain+`"]`)))
	row := `#ack-history tr[data-watcher="` + opsMain + `"]`
	if who, client := b.text(t, row+` td[data-principal]`), b.text(t, row+` td[data-transport]`); !strings.Contains(who, "gw-ops") || !strings.Contains(who, "agent:ops") || !strings.Contains(client, "awareness-dashboard") || !strings.Contains(client, "http") {
		t.Errorf("history row: who %q, client %q; want gw-ops agent:ops, http awareness-dashboard", who, client)
	}
	if n := b.count(t, `#ack-history tr[data-watcher]`); n != 1 {
		t.Errorf("the agent's history shows %d records, want its 1 (admin acknowledged nothing)", n)
	}

	// Another agent's session: one page that says so, no panel of refusals.
	b.do(t, 10*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker), chromedp.WaitVisible(chromedp.CSS(`[data-forbidden-page]`)))
	if n := b.count(t, `[role="alert"]:not([hidden])`); n != 1 {
		t.Errorf("another agent's session page shows %d alerts, want 1", n)
	}
	if got := b.text(t, `[data-forbidden-page]`); !strings.Contains(got, "agent ops only") || !strings.Contains(got, "agent:main:subagent:worker-1") {
		t.Errorf("forbidden page says %q", got)
	}
	b.shots(t, "agent-forbidden", "")
}

// TestSessionPageRefreshesAfterDelete_WAT5_REC2: after deleteSession the session page
// refreshes by itself (the events shown are no longer the server's): only the deleted
// event stays (LIF-1), the history gap is shown, and it says why it refreshed; the
// watcher's notice about the session stays pending, its cursor retired (LIF-1).
func TestSessionPageRefreshesAfterDelete_WAT5_REC2(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "run_completed", "actorType": "system", "runId": "r1"})
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker), chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="3"]`)))
	b.waitJS(t, 10*time.Second, allLive)

	srv.gql(t, `mutation($k: String!) { deleteSession(sessionKey: $k) }`, map[string]any{"k": worker}, nil)
	start := time.Now()
	// The audit runs every 5 s: within two rounds.
	b.waitJS(t, 12*time.Second, `!!document.querySelector('[data-refreshed]') && !document.querySelector('#timeline li[data-seq="3"]')`)
	t.Logf("refreshed %v after deleteSession", time.Since(start).Round(time.Millisecond))
	b.waitJS(t, 5*time.Second, `!!document.querySelector('#timeline li[data-history-gap]') && `+allLive)
	if got := b.text(t, `[data-refreshed]`); !strings.Contains(got, "no longer on the server") {
		t.Errorf("refresh banner = %q", got)
	}
	if n := b.count(t, `#timeline li[data-seq]`); n != 1 || b.count(t, `#timeline li[data-seq="4"][data-kind="deleted"]`) != 1 {
		t.Errorf("%d events on the timeline after the deletion, want the deleted event (4) alone", n)
	}
	if got := b.text(t, `dd[data-version]`); got != "4" {
		t.Errorf("state version after the deletion = %q, want 4 (the deleted event; the head stays, SIG-3)", got)
	}
	b.shots(t, "deleted", `!!document.querySelector('#timeline li[data-history-gap]')`)
}

// TestNoticeShowsGenerations_LIF2: a notice whose target was reset shows the pair's
// generations (target, watcher); one of a pair still in its first generations shows
// none; the reset session's page names its generation.
func TestNoticeShowsGenerations_LIF2(t *testing.T) {
	b := newBrowser(t)
	srv := startServer(t, freeAddr(t), filepath.Join(t.TempDir(), "awareness.db"))
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#notice-list .empty`)))
	card := fmt.Sprintf(`#notice-list .notice[data-watcher=%q][data-target=%q]`, manager, worker)
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(card)))
	if n := b.count(t, card+` .badge.generation`); n != 0 {
		t.Errorf("a first-generation notice shows %d generation badges", n)
	}
	srv.gql(t, `mutation($k: String!) { resetSession(sessionKey: $k) }`, map[string]any{"k": worker}, nil)
	b.do(t, noticeWithin, chromedp.WaitNotPresent(chromedp.CSS(card)))
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana", "channel": "telegram"})
	b.do(t, noticeWithin, chromedp.WaitVisible(chromedp.CSS(card+` .badge.generation`)))
	if got := b.text(t, card+` .badge.generation`); got != "gen 2/1" {
		t.Errorf("generation badge = %q, want gen 2/1", got)
	}
	// The session page names the generation of a reset session.
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker),
		chromedp.WaitVisible(chromedp.CSS(`[data-fact="generation"] dd`)))
	if got := b.text(t, `[data-fact="generation"] dd`); got != "2" {
		t.Errorf("the session page's generation = %q, want 2", got)
	}
}

// TestSessionPageRefreshesAfterRestartOnOtherData_REC3: a session page whose server
// restarts on another database refreshes by itself instead of asking changesSince 7
// for ever: a state version below the one shown (CURSOR_AHEAD) and, on a third
// database, an event #7 that is not the one shown both reload the whole view.
func TestSessionPageRefreshesAfterRestartOnOtherData_REC3(t *testing.T) {
	b := newBrowser(t)
	addr := freeAddr(t)
	dir := t.TempDir()
	// The other databases, prepared beforehand: two events; nine others.
	prepare := func(name string, kinds ...string) string {
		db := filepath.Join(dir, name)
		s := startServer(t, freeAddr(t), db)
		for i, k := range kinds {
			s.record(t, map[string]any{"sessionKey": worker, "kind": k, "actorType": "system", "dedupeKey": fmt.Sprintf("%s-%d", name, i)})
		}
		s.stop(t)
		return db
	}
	fewer := prepare("fewer.db", "compacted", "run_completed")
	other := prepare("other.db", "compacted", "compacted", "compacted", "compacted", "compacted", "compacted", "compacted", "compacted", "compacted")

	srv := startServer(t, addr, filepath.Join(dir, "first.db"))
	for i := range 7 {
		srv.record(t, map[string]any{"sessionKey": worker, "kind": "run_failed", "actorType": "system", "outcome": "timeout", "runId": fmt.Sprintf("r%d", i)})
	}
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker), chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="7"]`)))
	b.waitJS(t, 10*time.Second, allLive)
	if got := b.text(t, `dd[data-version]`); got != "7" {
		t.Fatalf("state version = %q, want 7", got)
	}

	for _, step := range []struct {
		db, why string
		version int
	}{{fewer, "below the 7 shown", 2}, {other, "not the one shown", 9}} {
		srv.stop(t)
		b.do(t, 10*time.Second, chromedp.WaitNotPresent(chromedp.CSS(`#conn[data-state="connected"]`)))
		srv = startServer(t, addr, step.db)
		start := time.Now()
		b.waitJS(t, 15*time.Second, `!!document.querySelector('[data-refreshed]') && document.querySelector('dd[data-version]') && document.querySelector('dd[data-version]').textContent === '`+strconv.Itoa(step.version)+`'`)
		t.Logf("%s: refreshed %v after the server was ready", filepath.Base(step.db), time.Since(start).Round(time.Millisecond))
		b.waitJS(t, 10*time.Second, `document.querySelectorAll('#timeline li[data-seq]').length === `+strconv.Itoa(step.version)+` && `+allLive)
		if got := b.text(t, `[data-refreshed]`); !strings.Contains(got, step.why) {
			t.Errorf("%s: refresh banner = %q, want it to say %q", filepath.Base(step.db), got, step.why)
		}
		if n := b.count(t, `#timeline li[data-kind="run_failed"]`); n != 0 {
			t.Errorf("%s: %d events of the first database remain", filepath.Base(step.db), n)
		}
		// It is live on the new data.
		srv.record(t, map[string]any{"sessionKey": worker, "kind": "goal_changed", "actorType": "human", "actorId": "telegram:ana"})
		b.waitJS(t, noticeWithin, `!!document.querySelector('#timeline li[data-seq="`+strconv.Itoa(step.version+1)+`"][data-kind="goal_changed"]')`)
		if step.version == 2 {
			b.shots(t, "restart-other-data", `!!document.querySelector('[data-refreshed]')`)
		}
	}
}

// TestOneBannerPerOutage: during an outage the session page says so once, in the
// outage banner (never a banner per panel), every panel's chip says stale or
// reconnecting, no empty text claims "up to date", and the retry countdown never says
// more than the 2.5 s cap. When the server is back the banner goes.
func TestOneBannerPerOutage(t *testing.T) {
	b := newBrowser(t)
	addr := freeAddr(t)
	db := filepath.Join(t.TempDir(), "awareness.db")
	srv := startServer(t, addr, db)
	srv.record(t, map[string]any{"sessionKey": worker, "kind": "child_spawned", "actorType": "agent", "actorId": manager, "watchers": []string{manager}})
	b.do(t, 20*time.Second, chromedp.Navigate(srv.URL+"/#/session/main/"+worker), chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-seq="1"]`)))
	b.waitJS(t, 10*time.Second, allLive)
	b.do(t, 2*time.Second, evalJS(retryLeftJS))
	// Record every countdown the label shows from now on.
	b.do(t, 2*time.Second, evalJS(`window.seenLeft = []; setInterval(() => { const v = retryLeft(); if (v >= 0) seenLeft.push(v); }, 50)`))

	srv.stop(t)
	b.waitJS(t, 10*time.Second, `!document.querySelector('#outage').hidden`)
	// Reload the page's panels while down: a route change to the same page's twin, and back.
	b.do(t, 5*time.Second, evalJS(`location.hash = '#/session/main/`+worker+`?since=0'`))
	b.waitJS(t, 10*time.Second, `['timeline-panel','watchers-panel','targets-panel','activity-chart','about-panel','held-panel','upstream'].every((id) => { const p = document.getElementById(id); return p && p.dataset.freshness === 'stale'; })`)
	time.Sleep(6 * time.Second) // several retries of every panel and of the connection
	if n := b.count(t, `.banner:not([hidden])`); n != 1 {
		t.Errorf("%d banners during the outage, want the one outage banner:\n%s", n, b.str(t, `[...document.querySelectorAll('.banner:not([hidden])')].map((e) => e.textContent).join('\n')`))
	}
	if n := b.count(t, `[data-load-failed]`); n != 0 {
		t.Errorf("%d panels show their own outage alert", n)
	}
	if n := b.count(t, `[data-empty-notices]`); n != 0 {
		t.Errorf("%d notice lists claim an up-to-date state during the outage", n)
	}
	if n := b.count(t, `.freshness[data-state="live"]`); n != 0 {
		t.Errorf("%d panels say live during the outage", n)
	}
	if got := b.text(t, `#outage`); !strings.Contains(got, "cannot be reached") {
		t.Errorf("outage banner = %q", got)
	}
	label := b.text(t, `#conn .conn-label`)
	if m := regexp.MustCompile(`retrying in ([0-9.]+)s`).FindStringSubmatch(label); m != nil {
		if v, _ := strconv.ParseFloat(m[1], 64); v > 2.5 {
			t.Errorf("label %q says more than the 2.5 s cap", label)
		}
	}
	if max := b.eval(t, `seenLeft.length ? Math.max(...seenLeft) : -1`); max < 0 || max > 2.5 {
		t.Errorf("the countdown showed up to %vs (%v samples), want at most the 2.5 s cap", max, b.eval(t, `seenLeft.length`))
	}
	b.shots(t, "stale", "")

	startServer(t, addr, db)
	b.waitJS(t, 15*time.Second, `document.querySelector('#outage').hidden && `+allLive)
}
