package mcpserver

import "github.com/awareness/awareness/internal/awareness"

// What a call costs its caller through Config.Charge: the query points GraphQL's cost
// rules in graph/cost.go give the operation that returns the same fields, about a
// microsecond of CPU a point, and its writes: 1 for an append, a watch, an
// acknowledgement or a subscription started.
type coster interface{ cost() (points, writes int) }

// Points of the fields a result holds per element.
const (
	eventFields   = 8
	sessionFields = 11
	noticeFields  = 9
	// listDefault is the element count assumed for a list without a size, such as
	// the pending notices, as graph.DefaultListCost.
	listDefault = 10
	// pendingCost reads a watcher's pending notices.
	pendingCost = 1 + listDefault*noticeFields
)

func digestCost(watcher *string) int {
	if watcher == nil {
		return 0
	}
	return pendingCost
}

func (in statusIn) cost() (int, int) {
	limit := awareness.MaxChangesLimit
	if in.Limit != nil {
		limit = min(max(int(*in.Limit), 1), awareness.MaxChangesLimit)
	}
	points := 4
	if in.ChangesSince != nil {
		points += limit + 6 + limit*eventFields // the read, then stateChanges and its events
	}
	return points + digestCost(in.Watcher), 0
}

func (in listIn) cost() (int, int) {
	first := defaultListFirst
	if in.First != nil {
		first = min(max(int(*in.First), 1), awareness.MaxListLimit)
	}
	return 1 + first + 1 + first*sessionFields + 3 + digestCost(in.Watcher), 0
}

func (in pendingIn) cost() (int, int) { return pendingCost, 0 }

// A wait reads the pending notices twice and starts a subscription.
func (in waitIn) cost() (int, int) { return 2 * pendingCost, 1 }

func (in ackIn) cost() (int, int) { return 1 + max(len(in.Notices), 1)*noticeFields + pendingCost, 1 }

func (in recordIn) cost() (int, int) { return 1 + 4 + 1 + eventFields + digestCost(in.Watcher), 1 }

func (in watchIn) cost() (int, int) { return 1 + 2 + 1 + 8 + pendingCost, 1 }
