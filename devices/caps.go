package devices

import (
	"context"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// capSource says who set a GPU's enforced limit.
type capSource int

const (
	srcNone       capSource = iota // the default limit, or one llmgw did not set
	srcController                  // cap.<UUID> of the node's variable
	srcFallback                    // the lease ran out (or the share is unreadable): fallback.<UUID> or fallback_watts
	srcShare                       // the node holding its share (format 2), below the controller's cap
)

// capGPU is what the capper knows of one physical GPU.
type capGPU struct {
	enforcedMW uint32
	defaultMW  uint32
	source     capSource
	// managed: a node variable named this node while the GPU was on it, so
	// its limit is llmgw's to set and, when the variable goes, to restore.
	managed bool
	err     string // the last failure, NVML's text; "" when none
	// why a fallback holds ("controller lost", "share unreadable"), and
	// the node's share while it sets the limit (srcShare), for the state.
	why    string
	shareW float64
}

// CapState is one GPU's power limit as the capper last set or read it.
type CapState struct {
	EnforcedW, DefaultW float64
	// State is what Stats reports as power_cap: "capped 450 W by
	// controller", "capped 380 W by node share 2400 W", "fallback 400 W:
	// controller lost", "default", "limit 500 W, not set by llmgw",
	// "error: <NVML error>".
	State string
}

func watts(mw uint32) float64 { return float64(mw) / 1000 }

func (g *capGPU) state() CapState {
	s := CapState{EnforcedW: watts(g.enforcedMW), DefaultW: watts(g.defaultMW)}
	switch {
	case g.err != "":
		s.State = "error: " + g.err
	case g.source == srcController:
		s.State = fmt.Sprintf("capped %g W by controller", s.EnforcedW)
	case g.source == srcShare:
		s.State = fmt.Sprintf("capped %g W by node share %g W", s.EnforcedW, g.shareW)
	case g.source == srcFallback:
		why := g.why
		if why == "" {
			why = "controller lost"
		}
		s.State = fmt.Sprintf("fallback %g W: %s", s.EnforcedW, why)
	case g.enforcedMW == g.defaultMW || g.defaultMW == 0:
		s.State = "default"
	default:
		s.State = fmt.Sprintf("limit %g W, not set by llmgw", s.EnforcedW)
	}
	return s
}

// capBoard is a physical GPU the manager's last scan found.
type capBoard struct {
	uuid string
	dev  nvmlseam.Device
}

// nodeCaps is one version of the node's caps variable.
type nodeCaps struct {
	exists bool
	index  uint64
	items  map[string]string
}

// heartbeat is one version of the heartbeat variable.
type heartbeat struct {
	exists bool
	index  uint64
	lease  string // its lease item, "" when none
}

// capper holds each GPU's power limit where the controller wants it. It
// reads the controller's caps from Nomad variables with blocking queries,
// applies a version all or nothing, falls back to safe caps when the
// controller's heartbeat stops, and restores defaults when the controller
// lets the node go. See docs/device-plugin.md, "Power caps".
type capper struct {
	cfg    PowerCaps
	client *api.Client
	log    hclog.Logger
	boards func() []capBoard
	now    func() time.Time

	mu   sync.Mutex
	gpus map[string]*capGPU

	// Owned by run's goroutine.
	node      nodeCaps
	beat      heartbeat
	renewed   time.Time // when this node last saw the heartbeat move
	leaseLost bool
	// applied is the node variable's index last applied (or refused), so a
	// refused version is not retried until the controller writes another.
	applied uint64
	// The node's share (format 2) as the node variable last said, or why
	// it could not be read (then the fallbacks hold); the controller's caps
	// in mW; the holder; the caps it gives, in mW by UUID, while engaged.
	share     devicesapi.NodeShare
	shareErr  string
	ctlCaps   map[string]uint32
	holder    *devicesapi.ShareHolder
	shareCaps map[string]uint32
}

func newCapper(cfg PowerCaps, log hclog.Logger, boards func() []capBoard) (*capper, error) {
	ac := api.DefaultConfig()
	if cfg.NomadAddr != "" {
		ac.Address = cfg.NomadAddr
	}
	if cfg.token != "" {
		ac.SecretID = cfg.token
	}
	ac.Namespace = cfg.Namespace
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("power_caps: Nomad client for %s: %w", ac.Address, err)
	}
	return &capper{cfg: cfg, client: client, log: log.Named("power_caps"), boards: boards, now: time.Now, gpus: map[string]*capGPU{},
		holder: newHolder(cfg), shareCaps: map[string]uint32{}}, nil
}

func newHolder(cfg PowerCaps) *devicesapi.ShareHolder {
	return devicesapi.NewShareHolder(devicesapi.ShareConfig{Hold: cfg.ShareHold})
}

func (c *capper) nodePath() string { return devicesapi.NodeCapsPath(c.cfg.Prefix, c.cfg.NodeName) }
func (c *capper) beatPath() string { return c.cfg.Prefix + "/" + devicesapi.Heartbeat }

// State returns a GPU's cap state, false when the capper has not seen it.
func (c *capper) State(uuid string) (CapState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.gpus[uuid]
	if !ok {
		return CapState{}, false
	}
	return g.state(), true
}

// run applies caps until ctx ends. Caps stay as they are when it returns:
// a plugin that stops or restarts must not lift a cap.
func (c *capper) run(ctx context.Context) {
	defer c.client.Close()
	c.readLimits()
	c.renewed = c.now()
	nodeCh := make(chan nodeCaps)
	beatCh := make(chan heartbeat)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.watch(ctx, c.nodePath(), func(v *api.Variable, idx uint64) {
			nc := nodeCaps{index: idx}
			if v != nil {
				nc = nodeCaps{exists: true, index: v.ModifyIndex, items: v.Items}
			}
			select {
			case nodeCh <- nc:
			case <-ctx.Done():
			}
		})
	}()
	go func() {
		defer wg.Done()
		c.watch(ctx, c.beatPath(), func(v *api.Variable, idx uint64) {
			hb := heartbeat{index: idx}
			if v != nil {
				hb = heartbeat{exists: true, index: v.ModifyIndex, lease: v.Items[devicesapi.LeaseItem]}
			}
			select {
			case beatCh <- hb:
			case <-ctx.Done():
			}
		})
	}()
	c.log.Info("watching Nomad variables for this node's power caps", "caps", c.nodePath(), "heartbeat", c.beatPath(),
		"lease", c.cfg.Lease.String(), "namespace", c.cfg.Namespace)

	expiry := time.NewTimer(c.lease())
	defer expiry.Stop()
	tick := time.NewTicker(c.cfg.ShareInterval)
	defer tick.Stop()
	nodeSeen := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if nodeSeen {
				c.holdShare()
			}
		case nc := <-nodeCh:
			c.node = nc
			nodeSeen = true
			c.reconcile()
		case hb := <-beatCh:
			moved := hb.exists && (!c.beat.exists || hb.index != c.beat.index)
			first := c.beat.index == 0 && !c.beat.exists
			c.beat = hb
			if moved && !first {
				c.renewed = c.now()
				if c.leaseLost {
					c.leaseLost = false
					c.log.Info("controller's heartbeat moved again; its caps apply", "heartbeat_index", hb.index)
					if nodeSeen {
						c.reconcile()
					}
				}
			}
		case <-expiry.C:
		}
		left := c.renewed.Add(c.lease()).Sub(c.now())
		if left <= 0 && !c.leaseLost {
			c.leaseLost = true
			c.log.Warn("controller lost: its heartbeat did not move within the lease; applying fallback caps",
				"lease", c.lease().String(), "last_moved", c.renewed.Format(time.RFC3339))
			if nodeSeen {
				c.reconcile()
			}
		}
		if left <= 0 {
			left = c.lease()
		}
		expiry.Reset(left)
	}
}

// lease is the heartbeat variable's lease item when it parses, else
// power_caps.lease.
func (c *capper) lease() time.Duration {
	if c.beat.lease != "" {
		if d, err := time.ParseDuration(c.beat.lease); err == nil && d >= time.Second {
			return d
		}
	}
	return c.cfg.Lease
}

// watch runs a blocking-query watch of one variable; deliver gets the
// variable (nil while it does not exist) and the answer's index.
func (c *capper) watch(ctx context.Context, path string, deliver func(*api.Variable, uint64)) {
	w := blockingquery.Watch[*api.Variable]{
		Fetch: blockingquery.Nomad(func(q *api.QueryOptions) (*api.Variable, *api.QueryMeta, error) {
			return c.client.Variables().Peek(path, q)
		}),
		OnAnswer: deliver,
		OnError: func(err error, retryIn time.Duration) {
			c.log.Warn("cannot read power caps variable from Nomad", "path", path, "error", err, "retry_in", retryIn.String())
		},
	}
	w.Run(ctx)
}

// readLimits reads every GPU's enforced and default limit (at start, so a
// restarted plugin knows the caps it left in place).
func (c *capper) readLimits() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.boards() {
		g := c.gpuLocked(b.uuid)
		if mw, ret := b.dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
			g.enforcedMW = mw
		}
		if mw, ret := b.dev.GetPowerManagementDefaultLimit(); ret == nvml.SUCCESS {
			g.defaultMW = mw
		}
		if g.defaultMW != 0 && g.enforcedMW != g.defaultMW {
			c.log.Info("GPU power limit differs from its default at start; left as it is until the controller's caps say otherwise",
				"gpu", b.uuid, "enforced_w", watts(g.enforcedMW), "default_w", watts(g.defaultMW))
		}
	}
}

func (c *capper) gpuLocked(uuid string) *capGPU {
	g, ok := c.gpus[uuid]
	if !ok {
		g = &capGPU{}
		c.gpus[uuid] = g
	}
	return g
}

// change is one limit to set.
type change struct {
	uuid   string
	dev    nvmlseam.Device
	fromMW uint32
	toMW   uint32
	source capSource
	// reason for the log: "controller cap", "fallback", "default", "node share".
	reason string
	// quiet: a change of the node's own share caps, which may move every
	// second: logged at debug (the holder logs when it engages and lifts).
	quiet bool
}

// reconcile brings every GPU's limit to what the node variable and the
// lease say now.
func (c *capper) reconcile() {
	boards := c.boards()
	sort.Slice(boards, func(i, j int) bool { return boards[i].uuid < boards[j].uuid })
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.node.exists {
		c.restoreLocked(boards)
		return
	}
	newVersion := c.node.index != c.applied
	caps, fallbacks, err := parseCaps(c.nodePath(), c.node.items)
	if err != nil {
		if newVersion {
			c.log.Error("power caps refused: nothing applied", "error", err)
		}
		c.applied = c.node.index
		for _, b := range boards {
			c.gpuLocked(b.uuid).err = err.Error()
		}
		return
	}
	c.ctlCaps = caps
	if share, serr := devicesapi.ParseShare(c.nodePath(), c.node.items); serr != nil {
		if newVersion {
			c.log.Error("power share refused: the GPUs hold their fallbacks until the controller writes one this plugin reads", "error", serr)
		}
		c.share, c.shareErr = devicesapi.NodeShare{}, serr.Error()
	} else {
		c.share, c.shareErr = share, ""
	}
	// Fallbacks hold when the lease is lost, and when the node's share
	// cannot be read: a share the node cannot hold must not leave its
	// GPUs uncapped.
	safe, why := c.leaseLost, "controller lost"
	if !safe && c.shareErr != "" {
		safe, why = true, "share unreadable"
	}
	known := map[string]bool{}
	for _, b := range boards {
		known[b.uuid] = true
	}
	for _, u := range sortedKeys(caps, fallbacks) {
		if !known[u] && newVersion {
			c.log.Error("power caps name a GPU this node does not have; ignored", "gpu", u, "variable", c.nodePath())
		}
	}
	var plan []change
	var bad []string
	for _, b := range boards {
		g := c.gpuLocked(b.uuid)
		g.managed = true
		cur, ret := b.dev.GetEnforcedPowerLimit()
		if ret != nvml.SUCCESS {
			g.err = "read enforced limit: " + nvml.ErrorString(ret)
			bad = append(bad, b.uuid+": "+g.err)
			continue
		}
		g.enforcedMW = cur
		lo, hi, ret := b.dev.GetPowerManagementLimitConstraints()
		if ret != nvml.SUCCESS {
			g.err = "read limit constraints: " + nvml.ErrorString(ret)
			bad = append(bad, b.uuid+": "+g.err)
			continue
		}
		def, ret := b.dev.GetPowerManagementDefaultLimit()
		if ret != nvml.SUCCESS {
			g.err = "read default limit: " + nvml.ErrorString(ret)
			bad = append(bad, b.uuid+": "+g.err)
			continue
		}
		g.defaultMW = def
		to, src, reason := def, srcNone, "default"
		capMW, hasCap := caps[b.uuid]
		switch {
		case !safe && hasCap:
			to, src, reason = capMW, srcController, "controller cap"
			if to < lo || to > hi {
				g.err = fmt.Sprintf("cap %g W is outside the GPU's limits %g-%g W", watts(to), watts(lo), watts(hi))
				bad = append(bad, b.uuid+": "+g.err)
				continue
			}
		case safe:
			fb, hasFB := fallbacks[b.uuid]
			if !hasFB && c.cfg.FallbackWatts != nil {
				fb, hasFB = uint32(math.Round(*c.cfg.FallbackWatts*1000)), true
			}
			switch {
			case hasFB:
				if hasCap {
					fb = min(fb, capMW) // never looser than the controller's last word
				}
				// The safest limit the GPU takes: a fallback outside its
				// range is held to the range, not refused.
				to, src, reason = min(max(fb, lo), hi), srcFallback, "fallback"
			case hasCap:
				to, src, reason = min(max(capMW, lo), hi), srcFallback, "fallback: the last controller cap"
			}
		}
		if sc, ok := c.shareCaps[b.uuid]; ok && !safe && sc < to {
			// The node's own cap, holding its share: held to the GPU's
			// range (the holder's floors are at least its minimum).
			to, src, reason = min(max(sc, lo), hi), srcShare, "node share"
		}
		g.why, g.shareW = why, c.share.Watts
		if to != cur {
			plan = append(plan, change{uuid: b.uuid, dev: b.dev, fromMW: cur, toMW: to, source: src, reason: reason,
				quiet: src == srcShare || g.source == srcShare && src == srcNone})
		} else {
			g.source, g.err = src, ""
		}
	}
	if newVersion {
		c.applied = c.node.index
	}
	if len(bad) > 0 {
		why := strings.Join(bad, "; ")
		c.log.Error("power caps refused: nothing applied", "variable", c.nodePath(), "index", c.node.index, "error", why)
		for _, ch := range plan {
			c.gpus[ch.uuid].err = "not applied: " + why
		}
		return
	}
	c.applyLocked(plan)
}

// shareRaise is the least rise, as a share of a share cap, that the node
// applies: a smaller one keeps the lower cap in place (safe: the caps sum
// to less), so that a cap does not move every second for the draw's
// small swings. A cap that falls is applied at once.
const shareRaise = 0.02

// holdShare runs every share_interval: it reads each GPU's draw, steps the
// node's share holder, and applies the caps it gives when they changed.
// Without a share (format 1, none given, the lease lost, the share
// unreadable) the holder's caps go.
func (c *capper) holdShare() {
	if !c.node.exists || c.leaseLost || c.shareErr != "" || c.share.Watts <= 0 {
		if len(c.shareCaps) > 0 || c.holder.Engaged() {
			c.holder = newHolder(c.cfg)
			clear(c.shareCaps)
			c.reconcile()
		}
		return
	}
	boards := c.boards()
	sort.Slice(boards, func(i, j int) bool { return boards[i].uuid < boards[j].uuid })
	gpus := make([]devicesapi.ShareGPU, 0, len(boards))
	for _, b := range boards {
		def, ret := b.dev.GetPowerManagementDefaultLimit()
		lo, _, ret2 := b.dev.GetPowerManagementLimitConstraints()
		if ret != nvml.SUCCESS || ret2 != nvml.SUCCESS || def == 0 {
			continue // reconcile reports it; a GPU without limits cannot be held
		}
		mx := def
		if cp, ok := c.ctlCaps[b.uuid]; ok && cp < mx {
			mx = cp
		}
		sg := c.share.GPUs[b.uuid]
		g := devicesapi.ShareGPU{UUID: b.uuid, Priority: sg.Priority, MaxWatts: watts(mx),
			FloorWatts: min(max(watts(lo), sg.Floor), watts(mx))}
		if mw, ret := b.dev.GetPowerUsage(); ret == nvml.SUCCESS {
			g.DrawWatts = watts(mw)
		} else {
			g.DrawWatts = g.MaxWatts // unread: counted at the most it may draw
		}
		gpus = append(gpus, g)
	}
	was := c.holder.Engaged()
	caps := c.holder.Step(c.now(), c.share.Watts, gpus)
	next := map[string]uint32{}
	drew := 0.0
	for i, g := range gpus {
		drew += g.DrawWatts
		if caps[i] <= 0 {
			continue
		}
		mw := uint32(math.Floor(caps[i] * 1000))
		if old, ok := c.shareCaps[g.UUID]; ok && mw > old && float64(mw) < float64(old)*(1+shareRaise) {
			mw = old
		}
		next[g.UUID] = mw
	}
	switch now := c.holder.Engaged(); {
	case now && !was:
		c.log.Info("node over its power share: capping its GPUs", "share_w", c.share.Watts, "drawing_w", drew)
	case was && !now:
		c.log.Info("node under its power share long enough: its share caps lift", "share_w", c.share.Watts, "drawing_w", drew, "hold", c.cfg.ShareHold.String())
	}
	if maps.Equal(next, c.shareCaps) {
		return
	}
	c.shareCaps = next
	c.reconcile()
}

// restoreLocked puts every GPU llmgw manages back to its default limit:
// the node variable is gone, the controller no longer manages the node.
func (c *capper) restoreLocked(boards []capBoard) {
	var plan []change
	for _, b := range boards {
		g := c.gpuLocked(b.uuid)
		if !g.managed {
			continue
		}
		cur, ret := b.dev.GetEnforcedPowerLimit()
		var def uint32
		if ret == nvml.SUCCESS {
			def, ret = b.dev.GetPowerManagementDefaultLimit()
		}
		if ret != nvml.SUCCESS {
			g.err = "restore default limit: " + nvml.ErrorString(ret)
			c.log.Error("cannot restore GPU's default power limit", "gpu", b.uuid, "error", g.err)
			continue
		}
		g.enforcedMW, g.defaultMW = cur, def
		if cur != def {
			plan = append(plan, change{uuid: b.uuid, dev: b.dev, fromMW: cur, toMW: def, source: srcNone, reason: "default: the controller no longer manages this node"})
			continue
		}
		g.source, g.err, g.managed = srcNone, "", false
	}
	if c.applyLocked(plan) {
		for _, ch := range plan {
			c.gpus[ch.uuid].managed = false
		}
	}
}

// applyLocked sets every limit of plan, or none: when one fails, the ones
// already set go back to what they were. It reports whether all were set.
func (c *capper) applyLocked(plan []change) bool {
	for i, ch := range plan {
		ret := ch.dev.SetPowerManagementLimit(ch.toMW)
		if ret == nvml.SUCCESS {
			continue
		}
		nerr := nvml.ErrorString(ret)
		g := c.gpus[ch.uuid]
		g.err = fmt.Sprintf("set %g W: %s", watts(ch.toMW), nerr)
		c.log.Error("GPU refused a power limit; putting back the ones already set, nothing applied",
			"gpu", ch.uuid, "watts", watts(ch.toMW), "reason", ch.reason, "error", nerr)
		for _, done := range plan[:i] {
			if r := done.dev.SetPowerManagementLimit(done.fromMW); r != nvml.SUCCESS {
				c.gpus[done.uuid].enforcedMW = done.toMW
				c.gpus[done.uuid].err = fmt.Sprintf("put back %g W after %s refused: %s", watts(done.fromMW), ch.uuid, nvml.ErrorString(r))
				c.log.Error("cannot put a GPU's power limit back", "gpu", done.uuid, "watts", watts(done.fromMW), "error", nvml.ErrorString(r))
				continue
			}
			c.gpus[done.uuid].err = fmt.Sprintf("not applied: %s refused %g W: %s", ch.uuid, watts(ch.toMW), nerr)
		}
		for _, rest := range plan[i+1:] {
			c.gpus[rest.uuid].err = fmt.Sprintf("not applied: %s refused %g W: %s", ch.uuid, watts(ch.toMW), nerr)
		}
		return false
	}
	for _, ch := range plan {
		g := c.gpus[ch.uuid]
		g.enforcedMW, g.source, g.err = ch.toMW, ch.source, ""
		msg := "GPU power capped"
		switch ch.source {
		case srcFallback:
			msg = "GPU power capped at its fallback: " + g.why
		case srcNone:
			msg = "GPU power cap lifted to the default limit"
		case srcShare:
			msg = "GPU power capped by the node's share"
		}
		if ch.quiet {
			c.log.Debug(msg, "gpu", ch.uuid, "watts", watts(ch.toMW), "was_w", watts(ch.fromMW), "reason", ch.reason)
			continue
		}
		c.log.Info(msg, "gpu", ch.uuid, "watts", watts(ch.toMW), "was_w", watts(ch.fromMW), "reason", ch.reason)
	}
	return true
}

// parseCaps reads the cap.<UUID> and fallback.<UUID> items, in mW. Any
// item it cannot read refuses the whole version, naming the item.
func parseCaps(path string, items map[string]string) (caps, fallbacks map[string]uint32, err error) {
	caps, fallbacks = map[string]uint32{}, map[string]uint32{}
	for _, k := range sortedKeys(items) {
		var into map[string]uint32
		var uuid string
		switch {
		case strings.HasPrefix(k, devicesapi.CapItem):
			into, uuid = caps, strings.TrimPrefix(k, devicesapi.CapItem)
		case strings.HasPrefix(k, devicesapi.FallbackItem):
			into, uuid = fallbacks, strings.TrimPrefix(k, devicesapi.FallbackItem)
		default:
			continue // room for other items
		}
		if uuid == "" {
			return nil, nil, fmt.Errorf("%s: item %q names no GPU UUID", path, k)
		}
		w, perr := strconv.ParseFloat(strings.TrimSpace(items[k]), 64)
		if perr != nil || math.IsNaN(w) || w <= 0 || w > 1e6 {
			return nil, nil, fmt.Errorf("%s: item %s = %q is not a power in watts (a number above zero)", path, k, items[k])
		}
		into[uuid] = uint32(math.Round(w * 1000))
	}
	return caps, fallbacks, nil
}

func sortedKeys[V any](ms ...map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
