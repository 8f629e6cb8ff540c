package awareness

import (
	"slices"
	"sync"
)

// publisher hands the events and notices of committed writes to the hub off the
// writer's path: a write answers its caller once its commit is durable, however many
// subscribers the hub then hands them to (P6). Publications go out in the order they
// were handed over (one queue, one sender), so a write that follows another one's
// answer is published after it (an acknowledgement's follow-up never overtakes the
// notice it follows). A notice is still handed over only after its commit (NTC-7).
//
// No goroutine of its own while idle: the first publication queued starts a sender,
// which publishes until the queue is empty and exits (as the hub's drainers do). A
// publication that finds the publisher idle and reaches at most maxInlinePublish
// subscriptions (an own notice: its watcher's one or two connections) is handed to
// them by the writer itself (Hub.tryPublish), a few non-blocking pushes instead of a
// goroutine started and woken per write; anything larger, or a hub busy with another
// publication, goes to the sender. The hub's slow-subscriber policy is unchanged:
// publishing never blocks on a subscriber.
type publisher struct {
	hub *Hub

	mu      sync.Mutex
	idle    sync.Cond // signalled when the sender exits
	queue   []publication
	sending bool
}

// maxInlinePublish bounds the deliveries a writer makes itself (see publisher).
const maxInlinePublish = 4

type publication struct {
	events  []Event
	notices []Notice
}

func newPublisher(hub *Hub) *publisher {
	p := &publisher{hub: hub}
	p.idle.L = &p.mu
	return p
}

// publish queues events and notices for the hub, or hands them over itself when they
// are few and the publisher is idle. When the hub has no subscriber at all they are
// dropped: a subscription that starts later reads the committed notices from the
// store (and the event stream is live-only).
func (p *publisher) publish(events []Event, notices []Notice) {
	if len(events) == 0 && len(notices) == 0 {
		return
	}
	if !p.hub.hasSubscribers() {
		return
	}
	pub := publication{events: events, notices: notices}
	p.mu.Lock()
	if p.sending {
		p.queue = append(p.queue, pub)
		p.mu.Unlock()
		return
	}
	// Idle: this publication is first. sending keeps the ones handed over meanwhile
	// queued behind it.
	p.sending = true
	p.mu.Unlock()
	inline := p.hub.tryPublish(events, notices, maxInlinePublish)
	p.mu.Lock()
	if !inline {
		p.queue = slices.Insert(p.queue, 0, pub)
	}
	if len(p.queue) > 0 {
		go p.send()
	} else {
		p.sending = false
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

func (p *publisher) send() {
	for {
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 {
			p.sending = false
			p.idle.Broadcast()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for i := range batch {
			p.hub.PublishEvents(batch[i].events...)
			p.hub.PublishNotices(batch[i].notices...)
			batch[i] = publication{}
		}
	}
}

// flush waits until everything queued before it was handed to the hub.
func (p *publisher) flush() {
	p.mu.Lock()
	for p.sending {
		p.idle.Wait()
	}
	p.mu.Unlock()
}
