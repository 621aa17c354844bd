package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/facility"
)

// Job meta keys (docs/architecture.md, "Names every part shares").
// Everything the controller needs to rebuild a replica after a restart is in
// them.
const (
	MetaManaged   = "llmgw.managed"    // "true" on every job the controller owns
	MetaModel     = "llmgw.model"      // catalog model name
	MetaProfile   = "llmgw.profile"    // catalog profile name
	MetaReplica   = "llmgw.replica"    // replica id, "<model>-<i>"
	MetaProfileFP = "llmgw.profile_fp" // facility.ProfileFingerprint of model and profile
	MetaGen       = "llmgw.gen"        // generation of the replica's jobs, part of the job ID
	MetaDomain    = "llmgw.domain"     // the decision's scope, FormatScope
	MetaShards    = "llmgw.shards"     // number of task groups (nodes of the replica)
	MetaNodes     = "llmgw.nodes"      // node of each shard, comma-separated, shard order
	MetaRender    = "llmgw.render"     // RenderVersion the job was rendered with
	MetaWatts     = "llmgw.watts"      // each shard's declared or derived draw in W, shard order
	MetaGPU       = "llmgw.gpu"        // GPU model of every shard
	MetaGPUs      = "llmgw.gpus"       // GPUs of each shard
	// MetaAdapters is "runtime" on a job whose engine starts with no LoRA
	// adapter named and gets the catalog's from the controller while it
	// runs (engine.PlanAdapters); absent where the adapters are given at
	// start, in the task's adapter blocks.
	MetaAdapters = "llmgw.adapters"
)

// AdaptersRuntime is MetaAdapters' value.
const AdaptersRuntime = "runtime"

// JobIDPrefix starts every managed job's ID, so the controller can list
// only its own jobs.
const JobIDPrefix = "llmgw-"

// Task group meta keys.
const (
	GroupMetaShard = "llmgw.shard" // the shard's index (rank)
	GroupMetaNode  = "llmgw.node"  // the node the shard is pinned to
)

// RenderVersion is written to job meta llmgw.render. It changes when a
// change to this package changes what runs (not only how the job reads), so
// that the controller can roll jobs rendered by an older version even though
// their profile fingerprint did not change.
const RenderVersion = 2

// ErrNotManaged is returned by ParseMeta for a job the controller does not
// own (no llmgw.managed = "true").
var ErrNotManaged = errors.New("job not managed by llmgw")

// ErrBadMeta wraps every problem ParseMeta finds in a managed job's meta.
var ErrBadMeta = errors.New("bad llmgw job meta")

// Meta is what a managed job's meta says about its replica.
type Meta struct {
	Model     string
	Profile   string
	Replica   string
	ProfileFP string
	Gen       int
	Domain    facility.Scope
	Shards    int
	Nodes     []string // node of each shard, in shard order; len(Nodes) == Shards
	Render    int
	// Watts is each shard's draw as decided at placement (declared, or
	// derived from the node's GPU power limit), so that a job whose profile
	// has left the catalog still counts what it draws.
	Watts []float64
	GPU   string
	GPUs  int
}

// JobID returns the Nomad job ID of generation gen of a replica rendered
// from a profile with fingerprint fp: "llmgw-<replica>-<fp[:8]>-g<gen>".
// The same replica, fingerprint and generation always give the same ID, so
// that check-and-set registration (register only if the job does not
// exist) makes a retry, a restarted controller or a second one a no-op
// instead of a duplicate. A changed profile gives a new ID, and so does a
// new generation (a copy of a current job placed elsewhere, for a drain):
// either way the new job runs beside the old one until it serves.
func JobID(replica, fp string, gen int) string {
	if len(fp) > 8 {
		fp = fp[:8]
	}
	return JobIDPrefix + replica + "-" + fp + "-g" + strconv.Itoa(gen)
}

// ServiceName returns the name of the service every replica of model
// registers: "llmgw-<model>" made a valid RFC 1123 label, as Nomad and
// Consul require (lower case; characters other than letters, digits and
// '-' become '-'; longer than 63 characters: cut, with a hash of the full
// name appended). Two model names may map to one service name
// ("llama-3.1" and "llama-3-1"); the tag model=<model> tells them apart.
func ServiceName(model string) string { return dnsLabel("llmgw-" + model) }

// DistServiceName returns the name of the service the leader (shard 0) of
// a multi-node replica registers on its dist port, where the other shards
// find it.
func DistServiceName(replica string) string { return dnsLabel("llmgw-" + replica + "-dist") }

// GroupName returns the task group name of shard i: "shard-<i>".
func GroupName(i int) string { return "shard-" + strconv.Itoa(i) }

// ShardIndex parses a task group name made by GroupName.
func ShardIndex(group string) (int, bool) {
	s, ok := strings.CutPrefix(group, "shard-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}

// FormatScope writes a scope as its domains coarse to fine, comma-separated:
// "site=ams1,room=a,row=r01,rack=r01-k01,pdu=p01-k01-a".
func FormatScope(s facility.Scope) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// ParseScope parses what FormatScope writes. The empty string is the empty
// scope.
func ParseScope(s string) (facility.Scope, error) {
	if s == "" {
		return nil, nil
	}
	var out facility.Scope
	for part := range strings.SplitSeq(s, ",") {
		d, err := facility.ParseDomain(part)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && out[n-1].Level >= d.Level {
			return nil, fmt.Errorf("scope %q: levels not coarse to fine", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseMeta reads a job's meta. It returns ErrNotManaged for a job the
// controller does not own, and an error wrapping ErrBadMeta for a managed
// job whose meta is incomplete or malformed (the controller treats such a
// job as an orphan: it cannot tell which replica it is).
func ParseMeta(meta map[string]string) (Meta, error) {
	if meta[MetaManaged] != "true" {
		return Meta{}, ErrNotManaged
	}
	var m Meta
	var errs []error
	need := func(key string, dst *string) {
		v, ok := meta[key]
		if !ok || v == "" {
			errs = append(errs, fmt.Errorf("%s: missing", key))
		}
		*dst = v
	}
	need(MetaModel, &m.Model)
	need(MetaProfile, &m.Profile)
	need(MetaReplica, &m.Replica)
	need(MetaProfileFP, &m.ProfileFP)
	var gen, shards, nodes, render, watts, gpus string
	need(MetaWatts, &watts)
	need(MetaGPU, &m.GPU)
	need(MetaGPUs, &gpus)
	need(MetaGen, &gen)
	need(MetaShards, &shards)
	need(MetaNodes, &nodes)
	need(MetaRender, &render)
	if gen != "" {
		g, err := strconv.Atoi(gen)
		if err != nil || g < 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a generation", MetaGen, gen))
		}
		m.Gen = g
	}
	if shards != "" {
		n, err := strconv.Atoi(shards)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive count", MetaShards, shards))
		}
		m.Shards = n
	}
	if nodes != "" {
		m.Nodes = strings.Split(nodes, ",")
		if m.Shards > 0 && len(m.Nodes) != m.Shards {
			errs = append(errs, fmt.Errorf("%s: %d nodes for %d shards", MetaNodes, len(m.Nodes), m.Shards))
		}
	}
	if watts != "" {
		for w := range strings.SplitSeq(watts, ",") {
			f, err := strconv.ParseFloat(w, 64)
			if err != nil || f < 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a draw in W", MetaWatts, w))
				break
			}
			m.Watts = append(m.Watts, f)
		}
		if m.Shards > 0 && len(m.Watts) != m.Shards && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("%s: %d draws for %d shards", MetaWatts, len(m.Watts), m.Shards))
		}
	}
	if gpus != "" {
		n, err := strconv.Atoi(gpus)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a GPU count", MetaGPUs, gpus))
		}
		m.GPUs = n
	}
	if render != "" {
		v, err := strconv.Atoi(render)
		if err != nil || v < 1 {
			errs = append(errs, fmt.Errorf("%s: %q is not a version", MetaRender, render))
		}
		m.Render = v
	}
	if v, ok := meta[MetaDomain]; ok {
		s, err := ParseScope(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", MetaDomain, err))
		}
		m.Domain = s
	} else {
		errs = append(errs, fmt.Errorf("%s: missing", MetaDomain))
	}
	if err := errors.Join(errs...); err != nil {
		return Meta{}, fmt.Errorf("%w: %w", ErrBadMeta, err)
	}
	return m, nil
}

// dnsLabel turns s into a valid RFC 1123 label (at most 63 characters of
// [a-z0-9-], starting and ending with a letter or digit).
func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	out := strings.Trim(string(b), "-")
	if len(out) > 63 {
		sum := sha256.Sum256([]byte(s))
		out = strings.TrimRight(out[:54], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	if out == "" {
		out = "llmgw"
	}
	return out
}
