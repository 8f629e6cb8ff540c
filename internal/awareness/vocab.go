package awareness

import (
	"slices"
	"strings"
)

// The vocabularies of the API: event kinds, actor types and run outcomes (SIG-1,
// SIG-2), and session kinds (KEY-2), whose AllSessionKinds is in key.go beside
// ClassifyKey. Each is one table, in schema order; validation, the All* lists, the
// store's cursor predicates, canonical summaries and error messages derive from the
// tables, and graph's vocabulary test ties every table to its GraphQL enum both ways.
// ARCHITECTURE.md's "Adding an event kind" lists the files a new value touches.

// EventKind is the type of a signal-log event (SIG-1).
type EventKind string

// Event kinds (SIG-1). Each has its row in eventKinds.
const (
	HumanDirectMessage EventKind = "human_direct_message"
	UpstreamMissing    EventKind = "upstream_missing"
	GoalChanged        EventKind = "goal_changed"
	ChildSpawned       EventKind = "child_spawned"
	RunCompleted       EventKind = "run_completed"
	RunFailed          EventKind = "run_failed"
	Compacted          EventKind = "compacted"
	Adopted            EventKind = "adopted"
	// The lifecycle kinds (LIF-1).
	Created EventKind = "created"
	Reset   EventKind = "reset"
	Deleted EventKind = "deleted"
)

// KindRole is what an event of a kind does to the cursors of its session's watchers
// (SIG-1, NTC-4, WAT-2).
type KindRole int

// Kind roles.
const (
	// LogOnly kinds are kept for reconciliation and never touch a cursor (NTC-4).
	LogOnly KindRole = iota
	// Notifying kinds are material: they move every watcher's material watermark and
	// open stale notices (NTC-1).
	Notifying
	// Seeding kinds start the producer-passed watchers' cursors at the event (WAT-2).
	Seeding
	// Resetting kinds start a new incarnation of their session (LIF-1, LIF-2): its
	// generation moves up by one, the cursors it holds as a watcher are deleted
	// (WAT-5), and the pending notices on it close, ResetCursor moving the cursors on
	// it to the event.
	Resetting
)

// eventKind is one row of the event-kind table.
type eventKind struct {
	kind EventKind
	role KindRole
	// outcome: the kind takes the outcome payload field (SIG-2).
	outcome bool
	// compaction: the event counts a compaction in the registry (REG-3).
	compaction bool
	// retires: after the event notified every watcher of its session, their cursors
	// are retired and the session is deleted (LIF-1).
	retires bool
	// summary is the canonical summary of an event given no summary (SIG-2).
	summary func(Payload) string
}

// eventKinds is the event-kind table, in schema order.
var eventKinds = []eventKind{
	{kind: HumanDirectMessage, role: Notifying, summary: via("human message via ")},
	{kind: UpstreamMissing, role: Notifying, summary: via("upstream missing via ")},
	{kind: GoalChanged, role: Notifying, summary: fixed("goal updated")},
	{kind: ChildSpawned, role: Seeding, summary: fixed("child session spawned")},
	{kind: RunCompleted, role: LogOnly, summary: fixed("child run completed")},
	{kind: RunFailed, role: LogOnly, outcome: true, summary: func(p Payload) string {
		if o, ok := lookupOutcome(p.Outcome); ok {
			return o.summary
		}
		return "child run failed"
	}},
	{kind: Compacted, role: LogOnly, compaction: true, summary: fixed("session compacted")},
	{kind: Adopted, role: LogOnly, summary: via("session adopted via ")},
	{kind: Created, role: LogOnly, summary: fixed("session created")},
	{kind: Reset, role: Resetting, summary: fixed("session reset")},
	{kind: Deleted, role: Notifying, retires: true, summary: fixed("session deleted")},
}

// via is the summary "<prefix><channel>", "unknown" standing for no channel.
func via(prefix string) func(Payload) string {
	return func(p Payload) string {
		if p.Channel != "" {
			return prefix + p.Channel
		}
		return prefix + "unknown"
	}
}

func fixed(s string) func(Payload) string { return func(Payload) string { return s } }

// AllEventKinds lists every kind in schema order.
var AllEventKinds = column(eventKinds, func(r eventKind) EventKind { return r.kind })

// AllKindRoles lists the roles in schema order.
var AllKindRoles = []KindRole{Notifying, Seeding, LogOnly, Resetting}

// KindInfo is one row of the event-kind table as the eventKinds query shows it: what
// a dashboard or a gateway needs to treat a kind it was not built with.
type KindInfo struct {
	Kind         EventKind
	Role         KindRole
	TakesOutcome bool
}

// EventKindTable returns the event-kind table in schema order.
func EventKindTable() []KindInfo {
	return column(eventKinds, func(r eventKind) KindInfo {
		return KindInfo{Kind: r.kind, Role: r.role, TakesOutcome: r.outcome}
	})
}

func lookupKind(k EventKind) (eventKind, bool) {
	i := slices.IndexFunc(eventKinds, func(r eventKind) bool { return r.kind == k })
	if i < 0 {
		return eventKind{}, false
	}
	return eventKinds[i], true
}

// Valid reports whether k is a known kind.
func (k EventKind) Valid() bool {
	_, ok := lookupKind(k)
	return ok
}

// Role returns what events of this kind do to cursors; LogOnly for an unknown kind.
func (k EventKind) Role() KindRole {
	r, _ := lookupKind(k)
	return r.role
}

// Notifies reports whether events of this kind open stale notices (SIG-1, NTC-4).
func (k EventKind) Notifies() bool { return k.Role() == Notifying }

// SeedsWatchers reports whether events of this kind start the producer-passed
// watchers' cursors (WAT-2).
func (k EventKind) SeedsWatchers() bool { return k.Role() == Seeding }

// TouchesCursors reports whether appending an event of this kind reads or writes
// cursors: every role but LogOnly.
func (k EventKind) TouchesCursors() bool { return k.Role() != LogOnly }

// StartsIncarnation reports whether an event of this kind starts a new incarnation
// of its session (LIF-2): its generation moves up by one.
func (k EventKind) StartsIncarnation() bool { return k.Role() == Resetting }

// Retires reports whether an event of this kind, once it notified the watchers of its
// session, retires their cursors and deletes the session (LIF-1).
func (k EventKind) Retires() bool {
	r, _ := lookupKind(k)
	return r.retires
}

// TakesOutcome reports whether events of this kind accept the outcome payload field.
func (k EventKind) TakesOutcome() bool {
	r, _ := lookupKind(k)
	return r.outcome
}

// outcomeKinds lists the kinds that take an outcome.
func outcomeKinds() []EventKind {
	var ks []EventKind
	for _, r := range eventKinds {
		if r.outcome {
			ks = append(ks, r.kind)
		}
	}
	return ks
}

// CountsCompaction reports whether an event of this kind counts a compaction in the
// session registry (REG-3).
func (k EventKind) CountsCompaction() bool {
	r, _ := lookupKind(k)
	return r.compaction
}

// CanonicalSummary is the summary written when a producer gives none (SIG-2); the
// kind's name for an unknown kind.
func CanonicalSummary(k EventKind, p Payload) string {
	if r, ok := lookupKind(k); ok {
		return r.summary(p)
	}
	return string(k)
}

// ActorType says who caused an event (SIG-2).
type ActorType string

// Actor types.
const (
	ActorHuman  ActorType = "human"
	ActorAgent  ActorType = "agent"
	ActorSystem ActorType = "system"
)

// AllActorTypes is the actor-type table, in schema order.
var AllActorTypes = []ActorType{ActorHuman, ActorAgent, ActorSystem}

// Valid reports whether a is a known actor type.
func (a ActorType) Valid() bool { return slices.Contains(AllActorTypes, a) }

// RunOutcome is the payload outcome of run_failed (SIG-2).
type RunOutcome string

// Run outcomes.
const (
	OutcomeCancelled RunOutcome = "cancelled"
	OutcomeTimeout   RunOutcome = "timeout"
	OutcomeError     RunOutcome = "error"
	// LIF-1 widens the outcomes; timeout stays accepted beside timed_out.
	OutcomeTimedOut RunOutcome = "timed_out"
	OutcomeBlocked  RunOutcome = "blocked"
	OutcomeLost     RunOutcome = "lost"
)

// runOutcome is one row of the outcome table.
type runOutcome struct {
	outcome RunOutcome
	// summary is the canonical summary of a run_failed event with this outcome.
	summary string
}

// runOutcomes is the outcome table, in schema order.
var runOutcomes = []runOutcome{
	{OutcomeCancelled, "child run cancelled"},
	{OutcomeTimeout, "child run timed out"},
	{OutcomeError, "child run failed"},
	{OutcomeTimedOut, "child run timed out"},
	{OutcomeBlocked, "child run blocked"},
	{OutcomeLost, "child run lost"},
}

// AllRunOutcomes lists every outcome in schema order.
var AllRunOutcomes = column(runOutcomes, func(r runOutcome) RunOutcome { return r.outcome })

func lookupOutcome(o RunOutcome) (runOutcome, bool) {
	i := slices.IndexFunc(runOutcomes, func(r runOutcome) bool { return r.outcome == o })
	if i < 0 {
		return runOutcome{}, false
	}
	return runOutcomes[i], true
}

// Valid reports whether o is a known outcome.
func (o RunOutcome) Valid() bool {
	_, ok := lookupOutcome(o)
	return ok
}

// column returns one column of a table.
func column[R, V any](rows []R, f func(R) V) []V {
	out := make([]V, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

// oneOf spells a list of values for an error message: "a, b or c".
func oneOf[V ~string](vs []V) string {
	var b strings.Builder
	for i, v := range vs {
		switch {
		case i == 0:
		case i == len(vs)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(v))
	}
	return b.String()
}

// DefaultWatchKinds is the selection of a cursor watched without kinds (LIF-3): SIG-1's
// notifying kinds, deleted among them.
var DefaultWatchKinds = func() []EventKind {
	var ks []EventKind
	for _, r := range eventKinds {
		if r.role == Notifying {
			ks = append(ks, r.kind)
		}
	}
	return ks
}()

// SelectableKinds are the kinds a watch may select (LIF-3): the notifying kinds and
// reset, whose notice is the new incarnation's (LIF-2).
var SelectableKinds = append(slices.Clip(DefaultWatchKinds), Reset)

// KindSelection is a watch's selection of kinds (LIF-3), as stored: the kinds' names
// in table order, comma-separated, without repeats; "" is the default selection.
// It is comparable, so a Cursor stays a value.
type KindSelection string

// List returns the selected kinds; DefaultWatchKinds for the default selection.
func (s KindSelection) List() []EventKind {
	if s == "" {
		return slices.Clone(DefaultWatchKinds)
	}
	var out []EventKind
	for k := range strings.SplitSeq(string(s), ",") {
		out = append(out, EventKind(k))
	}
	return out
}

// Has reports whether the selection holds kind k.
func (s KindSelection) Has(k EventKind) bool {
	if s == "" {
		return slices.Contains(DefaultWatchKinds, k)
	}
	for x := range strings.SplitSeq(string(s), ",") {
		if x == string(k) {
			return true
		}
	}
	return false
}

// CheckWatchKinds checks a watch's selection of kinds (LIF-3) and returns it as
// stored; nil is "", the default or an existing cursor's selection kept. An empty
// selection, or a kind that is unknown or cannot open a notice, is INVALID_ARGUMENT.
// A selection equal to the default is kept as given, not stored as "": a cursor with
// a selection of its own keeps its M in its row, and one that went back to "" would
// take the head's derived M, which counts kinds it did not select.
func CheckWatchKinds(kinds []string) (KindSelection, error) {
	if kinds == nil {
		return "", nil
	}
	if len(kinds) == 0 {
		return "", Errorf(EINVALID, "kinds selects no kind; omit it for the default selection (%s)", oneOf(DefaultWatchKinds))
	}
	sel := make(map[EventKind]bool, len(kinds))
	for i, k := range kinds {
		ek := EventKind(k)
		if !slices.Contains(SelectableKinds, ek) {
			return "", Errorf(EINVALID, "kinds[%d]: %q is not a kind a watch selects; want %s", i, k, oneOf(SelectableKinds))
		}
		sel[ek] = true
	}
	var out []string
	for _, k := range SelectableKinds {
		if sel[k] {
			out = append(out, string(k))
		}
	}
	return KindSelection(strings.Join(out, ",")), nil
}

// SelectedKinds lists the kinds that open a notice for the cursor (LIF-3).
func (c Cursor) SelectedKinds() []EventKind { return c.Kinds.List() }

// Selects reports whether an event of kind k opens a notice for the cursor (LIF-3).
func (c Cursor) Selects(k EventKind) bool { return c.Kinds.Has(k) }
