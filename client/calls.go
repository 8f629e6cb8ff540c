package client

import (
	"context"
	"slices"
	"time"
)

// Typed calls of the watch and notice operations: one GraphQL operation each, with the
// client's credentials. A refusal is an *Error with its ERR-1 code.

// WatchCursor is one watcher's cursor on one target (WAT-1): L ≤ N ≤ M.
type WatchCursor struct {
	Watcher       string    `json:"watcher"`
	Target        string    `json:"target"`
	TargetAgentID string    `json:"targetAgentId"`
	LastAcked     int64     `json:"lastAcked"`
	Notified      int64     `json:"notified"`
	Material      int64     `json:"material"`
	Pending       bool      `json:"pending"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// WatchResult is what WatchTarget did.
type WatchResult struct {
	// Watched is true when the watcher now watches the target.
	Watched bool `json:"watched"`
	// Reason says why not, when Watched is false.
	Reason string `json:"reason"`
	// Cursor is the pair's cursor; nil when Watched is false.
	Cursor *WatchCursor `json:"cursor"`
}

const cursorFields = `watcher target targetAgentId lastAcked notified material pending updatedAt`

const watchMutation = `mutation($in: WatchInput!) { watch(input: $in) { watched reason cursor { ` + cursorFields + ` } } }`

// WatchTarget makes watcher watch target from the target's current version on with
// the watch mutation (WAT-3): earlier history never notifies.
func (c *Client) WatchTarget(ctx context.Context, watcher string, target Target) (WatchResult, error) {
	in := map[string]any{"watcher": watcher, "target": target.SessionKey}
	if target.AgentID != "" {
		in["targetAgentId"] = target.AgentID
	}
	var res struct {
		Watch WatchResult `json:"watch"`
	}
	err := c.Do(ctx, watchMutation, map[string]any{"in": in}, &res)
	return res.Watch, err
}

const unwatchMutation = `mutation($w: String!, $t: String!, $a: String) { unwatch(watcher: $w, target: $t, targetAgentId: $a) }`

// UnwatchTarget removes watcher's cursor on target with the unwatch mutation (WAT-5)
// and reports whether a cursor was removed. A pending notice of the pair closes.
func (c *Client) UnwatchTarget(ctx context.Context, watcher string, target Target) (bool, error) {
	vars := map[string]any{"w": watcher, "t": target.SessionKey}
	if target.AgentID != "" {
		vars["a"] = target.AgentID
	}
	var res struct {
		Unwatch bool `json:"unwatch"`
	}
	err := c.Do(ctx, unwatchMutation, vars, &res)
	return res.Unwatch, err
}

const noticeFields = `watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt targetGeneration watcherGeneration closed redelivered delivery`

const pendingQuery = `query($w: String!) { pendingNotices(watcher: $w) { ` + noticeFields + ` } }`

// PendingNotices returns the watcher's pending notices as the service holds them now,
// without acknowledging them (NTC-7).
func (c *Client) PendingNotices(ctx context.Context, watcher string) ([]Notice, error) {
	var res struct {
		PendingNotices []Notice `json:"pendingNotices"`
	}
	err := c.Do(ctx, pendingQuery, map[string]any{"w": watcher}, &res)
	return res.PendingNotices, err
}

// AckOutcome is what acknowledgeNotices did with one named notice (NTC-3).
type AckOutcome string

// The outcomes of acknowledgeNotices.
const (
	// AckAcknowledged: this call acknowledged the notice; FollowUp is the notice that
	// opened for the changes after it, if any.
	AckAcknowledged AckOutcome = "acknowledged"
	// AckAlreadyAcknowledged: the notice had been acknowledged before, by an earlier
	// call whose answer was lost, another gateway or the dashboard; nothing changed.
	AckAlreadyAcknowledged AckOutcome = "alreadyAcknowledged"
	// AckSuperseded: the pair's pending notice is another one, in Pending, and the
	// named one was never acknowledged; nothing changed.
	AckSuperseded AckOutcome = "superseded"
	// AckNotPending: the pair has no cursor or nothing pending, and the named notice
	// was never acknowledged; nothing changed.
	AckNotPending AckOutcome = "notPending"
)

// Done reports whether the named notice is settled as acknowledged: by this call or
// an earlier one.
func (o AckOutcome) Done() bool { return o == AckAcknowledged || o == AckAlreadyAcknowledged }

// NoticeAck is the outcome of one named notice of acknowledgeNotices.
type NoticeAck struct {
	Watcher         string     `json:"watcher"`
	Target          string     `json:"target"`
	TargetAgentID   string     `json:"targetAgentId"`
	NotifiedVersion int64      `json:"notifiedVersion"`
	Outcome         AckOutcome `json:"outcome"`
	// FollowUp is, with AckAcknowledged, the notice that opened for the changes after
	// the acknowledged one (NTC-3); nil when none.
	FollowUp *Notice `json:"followUp"`
	// Pending is, with AckAlreadyAcknowledged or AckSuperseded, the pair's pending
	// notice now; nil when none.
	Pending *Notice `json:"pending"`
	// Dismissed is set on the answer of DismissNotice (RDL-2).
	Dismissed bool `json:"dismissed"`
}

func (a NoticeAck) key() noticeKey { return noticeKey{a.Watcher, a.TargetAgentID, a.Target} }

const acknowledgeMutation = `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId notifiedVersion outcome followUp { ` + noticeFields + ` } pending { ` + noticeFields + ` } } }`

// AcknowledgeNotices acknowledges exactly the named notices of watcher with the
// acknowledgeNotices mutation (NTC-3): each only while it is still its pair's pending
// notice. The answer says, per notice, what happened. It moves no Watcher's state:
// Watcher.Ack is this call plus the Watcher's bookkeeping.
// More than maxAckNotices notices are sent in several calls.
func (c *Client) AcknowledgeNotices(ctx context.Context, watcher string, notices []Notice) ([]NoticeAck, error) {
	var out []NoticeAck
	for chunk := range slices.Chunk(notices, maxAckNotices) {
		refs := make([]map[string]any, 0, len(chunk))
		for _, n := range chunk {
			ref := map[string]any{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion}
			if n.WatcherGeneration > 0 {
				ref["watcherGeneration"] = n.WatcherGeneration // LIF-2
			}
			refs = append(refs, ref)
		}
		var res struct {
			AcknowledgeNotices []NoticeAck `json:"acknowledgeNotices"`
		}
		if err := c.Do(ctx, acknowledgeMutation, map[string]any{"w": watcher, "n": refs}, &res); err != nil {
			return out, err
		}
		out = append(out, res.AcknowledgeNotices...)
	}
	return out, nil
}

// maxAckNotices is the most notices one acknowledgeNotices call may name.
const maxAckNotices = 1000

const digestFields = `digest { byKind { kind count } byActorType { actorType count } humanEvents lastHumanChannel latestVersion counted pruned }`

const pendingDigestsQuery = `query($w: String!) { pendingNotices(watcher: $w) { ` + noticeFields + ` ` + digestFields + ` } }`

// PendingDigests is PendingNotices with each notice's Digest (DIG-1), which the
// service reads from the log and prices per notice.
func (c *Client) PendingDigests(ctx context.Context, watcher string) ([]Notice, error) {
	var res struct {
		PendingNotices []Notice `json:"pendingNotices"`
	}
	err := c.Do(ctx, pendingDigestsQuery, map[string]any{"w": watcher}, &res)
	return res.PendingNotices, err
}

// WatchTargetRedeliver is WatchTarget that also sets the watch's maxRedeliver, 0 to
// 100: how often one opening of the pair's notice may come back after a drain
// neither acknowledged nor released (RDL-1).
func (c *Client) WatchTargetRedeliver(ctx context.Context, watcher string, target Target, maxRedeliver int) (WatchResult, error) {
	in := map[string]any{"watcher": watcher, "target": target.SessionKey, "maxRedeliver": maxRedeliver}
	if target.AgentID != "" {
		in["targetAgentId"] = target.AgentID
	}
	var res struct {
		Watch WatchResult `json:"watch"`
	}
	err := c.Do(ctx, watchMutation, map[string]any{"in": in}, &res)
	return res.Watch, err
}

const drainMutation = `mutation($w: String!) { drainNotices(watcher: $w) { ` + noticeFields + ` } }`

// DrainNotices is a turn's drain on the service (RDL-1): the watcher's pending
// notices neither snoozed nor held, with the drain recorded. One that is then neither
// acknowledged nor released comes back, marked Redelivered, after the service's stated
// number of the watcher's later turns or its stated time.
func (c *Client) DrainNotices(ctx context.Context, watcher string) ([]Notice, error) {
	var res struct {
		DrainNotices []Notice `json:"drainNotices"`
	}
	err := c.Do(ctx, drainMutation, map[string]any{"w": watcher}, &res)
	return res.DrainNotices, err
}

const releaseMutation = `mutation($w: String!, $n: [NoticeRef!]!) { releaseNotices(watcher: $w, notices: $n) { ` + noticeFields + ` } }`

// ReleaseNotices hands drained notices back to the service (RDL-1): the next
// DrainNotices hands them out, not as redeliveries.
func (c *Client) ReleaseNotices(ctx context.Context, watcher string, notices []Notice) ([]Notice, error) {
	refs := make([]map[string]any, 0, len(notices))
	for _, n := range notices {
		refs = append(refs, map[string]any{"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion})
	}
	var res struct {
		ReleaseNotices []Notice `json:"releaseNotices"`
	}
	err := c.Do(ctx, releaseMutation, map[string]any{"w": watcher, "n": refs}, &res)
	return res.ReleaseNotices, err
}

const snoozeMutation = `mutation($w: String!, $t: String!, $a: String, $v: Int!, $u: Time!) {
  snoozeNotice(watcher: $w, target: $t, targetAgentId: $a, notifiedVersion: $v, until: $u) { ` + noticeFields + ` } }`

// SnoozeNotice hides n until until, then the service delivers it again (RDL-2).
func (c *Client) SnoozeNotice(ctx context.Context, n Notice, until time.Time) (Notice, error) {
	var res struct {
		SnoozeNotice Notice `json:"snoozeNotice"`
	}
	err := c.Do(ctx, snoozeMutation, map[string]any{"w": n.Watcher, "t": n.Target, "a": n.TargetAgentID,
		"v": n.NotifiedVersion, "u": until.UTC().Format(time.RFC3339Nano)}, &res)
	return res.SnoozeNotice, err
}

const dismissMutation = `mutation($w: String!, $t: String!, $a: String, $v: Int!) {
  dismissNotice(watcher: $w, target: $t, targetAgentId: $a, notifiedVersion: $v) {
  watcher target targetAgentId notifiedVersion outcome dismissed followUp { ` + noticeFields + ` } pending { ` + noticeFields + ` } } }`

// DismissNotice acknowledges n without reconciling (RDL-2); the answer has Dismissed
// set.
func (c *Client) DismissNotice(ctx context.Context, n Notice) (NoticeAck, error) {
	var res struct {
		DismissNotice NoticeAck `json:"dismissNotice"`
	}
	err := c.Do(ctx, dismissMutation, map[string]any{"w": n.Watcher, "t": n.Target, "a": n.TargetAgentID, "v": n.NotifiedVersion}, &res)
	return res.DismissNotice, err
}
