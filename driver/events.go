package driver

import (
	"sync"

	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// backlogMax bounds the events kept while no TaskEvents stream is open.
const backlogMax = 256

// broker fans task events out to every open TaskEvents stream. Events
// published while no stream is open (between the plugin's start and the
// client's subscription) wait in a bounded backlog for the first one.
type broker struct {
	mu      sync.Mutex
	subs    map[int]chan *driverpb.DriverTaskEvent
	next    int
	backlog []*driverpb.DriverTaskEvent
	dropped func(*driverpb.DriverTaskEvent)
}

func newBroker(dropped func(*driverpb.DriverTaskEvent)) *broker {
	return &broker{subs: map[int]chan *driverpb.DriverTaskEvent{}, dropped: dropped}
}

// publish never blocks: a subscriber whose buffer is full loses the event.
func (b *broker) publish(ev *driverpb.DriverTaskEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 {
		b.backlog = append(b.backlog, ev)
		if len(b.backlog) > backlogMax {
			b.dropped(b.backlog[0])
			b.backlog = b.backlog[1:]
		}
		return
	}
	for _, ch := range b.subs {
		select {
		case ch <- ev:
		default:
			b.dropped(ev)
		}
	}
}

// subscribe returns a channel of events and a function that ends the
// subscription.
func (b *broker) subscribe() (<-chan *driverpb.DriverTaskEvent, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan *driverpb.DriverTaskEvent, backlogMax+64)
	for _, ev := range b.backlog {
		ch <- ev
	}
	b.backlog = nil
	id := b.next
	b.next++
	b.subs[id] = ch
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
	}
}
