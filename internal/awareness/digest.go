package awareness

import (
	"context"
	"slices"
)

// DigestRange names the part of a target's log a notice covers (DIG-1): the events
// with After < sequence <= Through, i.e. (L, N].
type DigestRange struct {
	Target  SessionRef
	After   int64 // L
	Through int64 // N
}

// RangeOf is the range of the log notice n covers: (L, N] of its target.
func RangeOf(n Notice) DigestRange {
	return DigestRange{Target: n.Target, After: n.ChangesSince, Through: n.NotifiedVersion}
}

// KindCount is how many events of one kind a digest counted.
type KindCount struct {
	Kind  EventKind
	Count int
}

// ActorTypeCount is how many events of one actor type a digest counted.
type ActorTypeCount struct {
	ActorType ActorType
	Count     int
}

// NoticeDigest is what a notice's range of the log holds, without its content (DIG-1):
// counts by kind (schema order, kinds with no event left out), by actor type (schema
// order, likewise), the number of human events, the channel of the latest human event
// ("" when it names none or there is none) and N. It is computed from the log alone, so
// it is the same, byte for byte, for the same (L, N) while the range is retained.
//
// Events at the start of the range may have been pruned (SIG-6): the digest counts the
// events that remain, and Pruned says how many of the range's N − L events (sequences
// are dense, SIG-3) are no longer in the log. Counted + Pruned = N − L.
type NoticeDigest struct {
	ByKind           []KindCount
	ByActorType      []ActorTypeCount
	HumanEvents      int
	LastHumanChannel string
	LatestVersion    int64 // N
	Counted          int
	Pruned           int64
}

// OptLastHumanChannel is LastHumanChannel, nil when "" (the API's null).
func (d *NoticeDigest) OptLastHumanChannel() *string {
	if d.LastHumanChannel == "" {
		return nil
	}
	return &d.LastHumanChannel
}

// DigestCount is one group of a digest's aggregate read: how many events of the range
// have this kind and actor type.
type DigestCount struct {
	Kind      EventKind
	ActorType ActorType
	Count     int
}

// BuildDigest returns the digest of r from its groups (in any order, a pair at most
// once) and the channel of the latest human event of the range. Stores that count in
// the database build their digests with it.
func BuildDigest(r DigestRange, groups []DigestCount, lastHumanChannel string) NoticeDigest {
	d := NoticeDigest{LatestVersion: r.Through, LastHumanChannel: lastHumanChannel,
		ByKind: []KindCount{}, ByActorType: []ActorTypeCount{}}
	for _, k := range AllEventKinds {
		n := 0
		for _, g := range groups {
			if g.Kind == k {
				n += g.Count
			}
		}
		if n > 0 {
			d.ByKind = append(d.ByKind, KindCount{Kind: k, Count: n})
		}
	}
	for _, a := range AllActorTypes {
		n := 0
		for _, g := range groups {
			if g.ActorType == a {
				n += g.Count
			}
		}
		if n > 0 {
			d.ByActorType = append(d.ByActorType, ActorTypeCount{ActorType: a, Count: n})
		}
		if a == ActorHuman {
			d.HumanEvents = n
		}
	}
	for _, g := range groups {
		d.Counted += g.Count
	}
	d.Pruned = max(r.Through-r.After-int64(d.Counted), 0)
	return d
}

// DigestOf returns the digest of r over events, the retained log of r's target in
// ascending sequence order (events outside r are ignored).
func DigestOf(r DigestRange, events []Event) NoticeDigest {
	var (
		groups  []DigestCount
		channel string
	)
	for _, e := range events {
		if e.Sequence <= r.After || e.Sequence > r.Through {
			continue
		}
		i := slices.IndexFunc(groups, func(g DigestCount) bool { return g.Kind == e.Kind && g.ActorType == e.ActorType })
		if i < 0 {
			groups = append(groups, DigestCount{Kind: e.Kind, ActorType: e.ActorType})
			i = len(groups) - 1
		}
		groups[i].Count++
		if e.ActorType == ActorHuman {
			channel = e.Payload.Channel
		}
	}
	return BuildDigest(r, groups, channel)
}

// CheckDigestRanges refuses (INVALID_ARGUMENT) a range that no notice covers: an
// empty target, a negative L or N ≤ L. A store checks them before it reads.
func CheckDigestRanges(rs []DigestRange) error {
	for i, r := range rs {
		switch {
		case r.Target.AgentID == "" || r.Target.Key == "":
			return Errorf(EINVALID, "digest range %d: the target is empty", i)
		case r.After < 0 || r.Through <= r.After:
			return Errorf(EINVALID, "digest range %d: (%d, %d] is not the range of a notice", i, r.After, r.Through)
		}
	}
	return nil
}

// NoticeDigests returns the digests of the notices ns (DIG-1), in their order, read in
// one read transaction of the store. Every notice's watcher must be one the caller may
// read (the notices it was given); a notice that is not pending (N ≤ L) is refused.
func (s *Service) NoticeDigests(ctx context.Context, ns []Notice) ([]NoticeDigest, error) {
	agents := make([]string, 0, len(ns))
	rs := make([]DigestRange, len(ns))
	for i, n := range ns {
		w, err := ResolveWatcher(n.Watcher)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(agents, w.AgentID) {
			agents = append(agents, w.AgentID)
		}
		rs[i] = RangeOf(n)
	}
	if err := s.authorize(ctx, agents...); err != nil {
		return nil, err
	}
	return s.store.Digests(ctx, rs)
}
