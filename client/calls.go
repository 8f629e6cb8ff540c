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

// WatchTarget makes watcher watch target from the target's current version on (the
// watch mutation, WAT-3): earlier history never notifies.
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

// UnwatchTarget removes watcher's cursor on target (the unwatch mutation, WAT-5); it
// reports whether a cursor was removed. A pending notice of the pair closes.
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

const noticeFields = `watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt targetGeneration watcherGeneration closed`

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
	// AckAlreadyAcknowledged: the notice had been acknowledged before (by an earlier
	// call whose answer was lost, another gateway, the dashboard); nothing changed.
	AckAlreadyAcknowledged AckOutcome = "alreadyAcknowledged"
	// AckSuperseded: the pair's pending notice is another one (Pending) and the named
	// one was never acknowledged; nothing changed.
	AckSuperseded AckOutcome = "superseded"
	// AckNotPending: the pair has no cursor (unwatched, reset, deleted, expired) or
	// nothing pending, and the named notice was never acknowledged; nothing changed.
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
}

func (a NoticeAck) key() noticeKey { return noticeKey{a.Watcher, a.TargetAgentID, a.Target} }

const acknowledgeMutation = `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId notifiedVersion outcome followUp { ` + noticeFields + ` } pending { ` + noticeFields + ` } } }`

// AcknowledgeNotices acknowledges exactly the named notices of watcher (the
// acknowledgeNotices mutation, NTC-3): each only while it is still its pair's pending
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
