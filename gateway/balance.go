package gateway

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
)

// Balance of the prefix policy. A conversation keeps its replica for all
// its turns, so the load bound (pickPrefix) cannot even out what the hash
// deals: a turn passed over for load goes elsewhere once, and the next turn
// of its conversation returns to the first choice. With few replicas the
// deal is uneven (three replicas, a hot tenant drawing its conversations
// to the replica its system prompt favours: 40–54 % of the conversations
// on one of them), and past its share that replica queues, keeps more
// conversations alive than its prompt cache holds, and recomputes their
// histories (docs/perf.md).
//
// So the weights that rank the replicas for a key follow the deal, slowly.
// After every round of engine reads (Options.EngineMetricsInterval, 5 s by
// default) each replica's share of the requests this gateway sent by the
// prefix policy, and the requests its engine held (waiting plus running,
// from every gateway; this gateway's own where the engine's metrics are
// unknown), feed moving averages over balanceTau rounds. While the pool
// is busy (its engines hold at least balanceBusy requests each on
// average, and it is sent at least one a round each), a replica sent more
// than (1+balanceBand) of its weight's share, whose engine holds at least
// its share of the requests held, steps its weight down by balanceStep,
// and one lowered and sent less than (1-balanceBand) of it steps back up;
// a pool gone quiet (under half of balanceBusy held) steps every weight
// back up. A step waits balanceHold rounds after the replica's last one
// (and after its first read), so that the average sees its effect. With the default reads that is a minute's average and at
// most a step per half minute: the balance corrects the deal, which lasts,
// not the queues, which come and go (on the benchmark's real replicas a
// balance that chased the engines' queues over seconds moved the same
// conversations back and forth, each move a history computed again). The
// engines' queues only confirm it: early in a run the shares are a few
// conversations' and may name a replica that copes.
//
// Lowering a weight in the weighted rendezvous order moves only keys off
// that replica, each to its next choice, and every turn of a moved
// conversation moves with it: the conversation recomputes its history
// once, on its new replica, and stays there. Gateways route a key alike,
// so each one's share of it is a sample of all of theirs; their weights
// agree as their samples do, and while they differ a conversation on the
// margin may be routed by two orders.

const (
	balanceTau   = 12 // rounds: the moving averages' time constant
	balanceHold  = 6  // rounds between steps of one replica
	balanceBand  = 0.15
	balanceBusy  = 1.0
	balanceStep  = 0.8 // the weight's factor per level
	balanceFloor = 7   // the lowest level: 0.8^7 ≈ 0.21 of the weight
)

// balanceState is what the balance keeps of one endpoint. held, sent,
// counted, reads and wait are the poll loop's alone (readEngine writes
// them for its endpoint in a round, rebalance reads them after the round);
// routed is counted by routing, level read by it.
type balanceState struct {
	held    float64 // moving average of the requests the engine held
	sent    float64 // moving average of the requests sent a round
	counted int64   // routed at the last read
	reads   int     // reads in the averages
	wait    int     // rounds until the level may step again
	routed  atomic.Int64
	level   atomic.Int32
}

// balanceFactors are the weight multipliers by level.
var balanceFactors = func() (f [balanceFloor + 1]float64) {
	for i := range f {
		f[i] = math.Pow(balanceStep, float64(i))
	}
	return f
}()

// balanceWeight is e's weight as the prefix policy ranks it: its weight
// times its balance factor.
func balanceWeight(e *endpoint) float64 {
	return float64(e.inst.Weight) * balanceFactors[e.bal.level.Load()]
}

// balanceAlpha is the moving average's weight of a new read.
var balanceAlpha = 1 - math.Exp(-1.0/balanceTau)

// observe adds a read of the requests the engine held, and the requests
// routed to it since the last.
func (b *balanceState) observe(held float64) {
	r := b.routed.Load()
	sent := float64(r - b.counted)
	b.counted = r
	if b.reads == 0 {
		b.held, b.sent = held, sent
		b.wait = balanceHold
	} else {
		b.held += balanceAlpha * (held - b.held)
		b.sent += balanceAlpha * (sent - b.sent)
	}
	b.reads++
}

// rebalance steps the balance levels of p's endpoints after a round of
// reads. It reports whether a level changed.
func (p *pool) rebalance() bool {
	var held, sent, weights float64
	n := 0
	for _, e := range p.eps {
		if e.inst.Weight <= 0 || e.bal.reads == 0 {
			continue
		}
		held += e.bal.held
		sent += e.bal.sent
		weights += float64(e.inst.Weight)
		n++
	}
	changed := false
	step := func(e *endpoint, d int32) {
		l := e.bal.level.Load() + d
		if l < 0 || l > balanceFloor {
			return
		}
		e.bal.level.Store(l)
		e.bal.wait = balanceHold
		changed = true
	}
	for _, e := range p.eps {
		b := &e.bal
		if b.wait > 0 {
			b.wait--
			continue
		}
		if e.inst.Weight <= 0 || b.reads == 0 || n == 0 {
			continue
		}
		if held/float64(n) < balanceBusy/2 {
			step(e, -1)
			continue
		}
		if held/float64(n) < balanceBusy || sent/float64(n) < 1 {
			continue
		}
		share := sent * float64(e.inst.Weight) / weights
		switch {
		case b.sent > share*(1+balanceBand) && b.held >= held*float64(e.inst.Weight)/weights*(1-1e-9):
			step(e, +1)
		case b.sent < share*(1-balanceBand):
			step(e, -1)
		}
	}
	// Only the ratios of the weights order the replicas: keep the least
	// lowered at level 0, so that the levels cannot all sink together.
	low := int32(balanceFloor)
	for _, e := range p.eps {
		low = min(low, e.bal.level.Load())
	}
	if low > 0 {
		for _, e := range p.eps {
			e.bal.level.Add(-low)
		}
	}
	return changed
}

// balanceSummary is "replica=factor(sent, held)" a round for each of p's endpoints, for
// the log.
func (p *pool) balanceSummary() string {
	var b strings.Builder
	for i, e := range p.eps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%.2f(sent %.1f, held %.1f)", e.inst.Replica, balanceFactors[e.bal.level.Load()], e.bal.sent, e.bal.held)
	}
	return b.String()
}
