package gateway

import (
	"math"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/jsonscan"
)

// Routing policies (gatewayapi.ListedModel.Routing, Options.Routing).
const (
	RouteLeastOutstanding = gatewayapi.RoutingLeastOutstanding
	RoutePrefix           = gatewayapi.RoutingPrefix
	// RouteSpill is the route of a prefix-routed request whose first
	// choice was over the load bound.
	RouteSpill = "spill"
)

// RouteHeader says, on every proxied answer, why its replica was chosen:
// RoutePrefix, RouteSpill or RouteLeastOutstanding.
const RouteHeader = "X-Llmgw-Route"

// DefaultPrefixLoadFactor is Options.PrefixLoadFactor's default: a replica
// with more than twice its share of the requests in flight is passed over
// by the prefix policy (on real llama.cpp replicas, 2 kept more of the
// cache than 1.25 in three rounds of three: docs/perf.md).
const DefaultPrefixLoadFactor = 2.0

// DefaultPrefixHistoryLoadFactor is Options.PrefixHistoryLoadFactor's
// default: a turn that continues a conversation is passed over only past
// four times its replica's share, twice a new conversation's bound. On
// real llama.cpp replicas it cut the spills from 51 to 9 and the engines'
// prompt time by a fifth at the same load (docs/perf.md).
const DefaultPrefixHistoryLoadFactor = 2 * DefaultPrefixLoadFactor

// Bounds of the prefix key.
const (
	// keyBytes is the most bytes of a request body the prefix key reads:
	// a prompt of megabytes costs no more to key than its first 32 KiB.
	keyBytes = 32 << 10
	// promptBlock is the block of a /v1/completions prompt string: its
	// key is the hash of its first block.
	promptBlock = 1 << 10
)

// prefixKey is what the prefix policy routes a request by: two hashes of
// its prompt's first blocks, computed from the body alone so that every
// gateway derives the same. conv is the conversation's (the system prompt
// and the first user turn, which every later turn repeats): it orders the
// replicas for the request, so every turn of a conversation has one first
// choice. shared is the prefix that conversations share (a chat's system
// prompt, a completion prompt's first block): it weighs that order
// towards the replicas the prefix favours (locality), so that a tenant's
// conversations meet where its system prompt is. A request with no system
// prompt has shared == conv.
//
// history is set when the request continues a conversation: a message
// follows its first user turn (an answer and a later turn), so the replica
// that served the earlier turns holds a history that any other would have
// to compute again. Such a request is bounded by the history load factor.
// opens is set when it opens one: a chat whose messages end with the first
// user turn. Such a request may wait for its replica (waitOpening).
type prefixKey struct {
	shared, conv   uint64
	ok             bool // false: nothing to key by, the default policy routes it
	history, opens bool
}

// keyOf derives the prefix key of a request body for path from its first
// keyBytes bytes (buf may be a prefix of the body). Anything it cannot read
// as the request's JSON gives no key.
func keyOf(path string, buf []byte) prefixKey {
	if len(buf) > keyBytes {
		buf = buf[:keyBytes]
	}
	switch path {
	case "/v1/chat/completions":
		return chatKey(buf)
	case "/v1/completions":
		return promptKey(buf)
	}
	return prefixKey{}
}

// chatKey keys a chat by its messages: each whole message is a block,
// hashed cumulatively (its role and its content as the client wrote them).
func chatKey(buf []byte) prefixKey {
	i := jsonscan.Member(buf, "messages")
	if i < 0 || buf[i] != '[' {
		return prefixKey{}
	}
	var k prefixKey
	d := xxhash.New()
	i++
	for n := 0; ; n++ {
		i = jsonscan.SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != '{' {
			break
		}
		end, err := jsonscan.SkipValue(buf, i)
		if err != nil {
			if n == 0 {
				// The first message runs past the bound: what there
				// is of it, as written, is the key.
				h := xxhash.Sum64(buf[i:])
				return prefixKey{shared: h, conv: h, ok: true}
			}
			break
		}
		var role, content []byte
		jsonscan.Members(buf[i:end], func(key []byte, vs, ve int) bool {
			switch string(key) {
			case "role":
				role = buf[i+vs : i+ve]
			case "content":
				content = buf[i+vs : i+ve]
			}
			return true
		})
		_, _ = d.Write(role)
		_, _ = d.Write([]byte{0})
		_, _ = d.Write(content)
		_, _ = d.Write([]byte{0})
		h := d.Sum64()
		user := string(role) == `"user"`
		if n == 0 {
			k = prefixKey{shared: h, conv: h, ok: true}
		} else if user {
			k.conv = h
		}
		if user {
			// The first user turn (with no system prompt it is both
			// parts); a message after it continues the conversation.
			j := jsonscan.SkipSpace(buf, end)
			k.history = j < len(buf) && buf[j] == ','
			k.opens = j < len(buf) && buf[j] == ']'
			return k
		}
		i = jsonscan.SkipSpace(buf, end)
		if i >= len(buf) || buf[i] != ',' {
			break
		}
		i++
	}
	return k
}

// promptKey keys a completion by its prompt string's first promptBlock
// bytes (as the client wrote them). A shorter prompt, or one that is not a
// string, has no key: there is little prefix to reuse, and a prompt that
// grows would change its key.
func promptKey(buf []byte) prefixKey {
	i := jsonscan.Member(buf, "prompt")
	if i < 0 || buf[i] != '"' || len(buf)-(i+1) < promptBlock {
		return prefixKey{}
	}
	block := buf[i+1 : i+1+promptBlock]
	for _, c := range block {
		if c == '"' || c < 0x20 {
			// The string ends (or is broken) within the block: an
			// escaped quote may be there too, but a short prompt is
			// not worth keying.
			return prefixKey{}
		}
	}
	h := xxhash.Sum64(block)
	return prefixKey{shared: h, conv: h, ok: true}
}

// rank is where endpoint e stands in key k's order: the weighted
// rendezvous score (highest first), -w/ln(u) with u uniform in (0, 1)
// from the conversation key and the replica's address, w the replica's
// weight times its locality for the shared key (locality). Every gateway
// computes the same for the same key and address; a replica joining or
// leaving changes no other replica's score, so only the keys it wins or
// held move. With uniform set (every replica ranked has the same weight
// and the key has no shared part of its own) the order is u's, and rank
// returns u's bits without the logarithm.
func rank(k prefixKey, e *endpoint, uniform bool) float64 {
	w := float64(e.inst.Weight)
	if w <= 0 {
		return 0
	}
	a := e.addrHash()
	h := mix(k.conv ^ a)
	if uniform && k.shared == k.conv {
		return float64(h>>11) + 1
	}
	if k.shared != k.conv {
		w *= locality(mix(k.shared ^ a))
	}
	return -w / math.Log(unit(h))
}

// locality is how strongly a replica draws the conversations of a shared
// prefix (a tenant's system prompt), from the hash of the prefix and its
// address: 1/(1-v), v uniform in (0, 1). Ranked by it, the replica first
// for a prefix draws about as many of its conversations as the second
// and third together (among n replicas, the k-th about 1/k of the first's
// share), so a tenant's conversations meet on a few replicas that hold
// its system prompt, while each conversation keeps one replica for all
// its turns. It depends on nothing but the prefix and the address.
func locality(h uint64) float64 { return 1 / (1 - unit(h)) }

// unit maps a hash to (0, 1).
func unit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }

// mix is splitmix64's finalizer: it spreads the bits of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// maxStackEps is how many endpoints pickPrefix ranks without allocating.
const maxStackEps = 128

// pickPrefix chooses the endpoint for the next attempt of a request with
// key k: the first in the key's order (rank) that can take a request as
// pick judges it (not tried, its breaker letting one through) and is
// within the load bound: its requests in flight, with this one, at most
// factor times its weight's share of all of them, counted by pick's
// measure (this gateway's plus the others' its engine reported) or by
// this gateway's alone. route is
// RoutePrefix for the first such endpoint in the order, RouteSpill when
// one was passed over for load. When every endpoint is over the bound
// (factor below 1), pick's choice stands.
func (p *pool) pickPrefix(k prefixKey, factor float64, tried []*epState, now time.Time) (ep *endpoint, probe bool, route string) {
	n := len(p.eps)
	if n == 0 {
		return nil, false, RoutePrefix
	}
	var rankBuf [maxStackEps]float64
	var loadBuf, ownBuf [maxStackEps]int64
	ranks, loads, owns := rankBuf[:0], loadBuf[:0], ownBuf[:0]
	if n > maxStackEps {
		ranks, loads, owns = make([]float64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	}
	var total, ownTotal, weights int64
	uniform := true
	for _, e := range p.eps {
		if e.inst.Weight != p.eps[0].inst.Weight {
			uniform = false
			break
		}
	}
	for _, e := range p.eps {
		own := e.outstanding.Load()
		l := own + e.others.Load()
		loads, owns = append(loads, l), append(owns, own)
		r := -1.0 // not usable
		if usable(e, tried, now) {
			r = rank(k, e, uniform)
			total += l
			ownTotal += own
			weights += int64(max(e.inst.Weight, 0))
		}
		ranks = append(ranks, r)
	}
	// within: replica i is within the bound by all gateways' requests in
	// flight (the others' as of the engine's last read) or by this
	// gateway's own (exact and current). Every gateway routes a key to the
	// same replica, so its own requests are a sample of everyone's; the
	// others' count alone lags by up to a read and spills on load that
	// has gone.
	within := func(i int) bool {
		w := p.eps[i].inst.Weight
		if w <= 0 || weights == 0 {
			return false
		}
		share := factor * float64(w) / float64(weights)
		return float64(loads[i]+1) <= math.Ceil(share*float64(total+1)) ||
			float64(owns[i]+1) <= math.Ceil(share*float64(ownTotal+1))
	}
	passed := false
	for {
		// The next in the key's order: the highest rank left.
		best, bestR := -1, -1.0
		for i, r := range ranks {
			if r > bestR {
				best, bestR = i, r
			}
		}
		if best < 0 {
			break
		}
		ranks[best] = -1
		if !within(best) {
			passed = true
			continue
		}
		if ok, probe := p.eps[best].br.acquire(now); ok {
			if passed {
				return p.eps[best], probe, RouteSpill
			}
			return p.eps[best], probe, RoutePrefix
		}
	}
	ep, probe = p.pick(tried, now)
	return ep, probe, RouteSpill
}

// usable reports whether pick may choose e: not tried already, its breaker
// letting a request through at now.
func usable(e *endpoint, tried []*epState, now time.Time) bool {
	for _, t := range tried {
		if t == e.epState {
			return false
		}
	}
	return e.br.available(now)
}

// policy is the routing policy of model: the gateway's own setting for it
// (Options.Routing), else the model list's, else least-outstanding.
func (g *Gateway) policy(t *table, model string) string {
	if p, ok := g.routing[model]; ok {
		return p
	}
	if lm, ok := t.listed[model]; ok && lm.Routing != "" {
		return lm.Routing
	}
	return RouteLeastOutstanding
}
