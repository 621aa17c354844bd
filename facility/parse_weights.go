package facility

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/llmgw/llmgw/weightsapi"
)

// MaxWarmSpares is the most warm_spares a model may ask for.
const MaxWarmSpares = 64

// maxWeightsBytes bounds weights { bytes }: 1 PB, far above any model, and
// exact as a float64.
const maxWeightsBytes = 1 << 50

// weights builds m.Weights from the model's weights block (weightsSource)
// and m.WeightsBytes from its bytes, each problem at the line of the field
// at fault.
func (d *decoder) weights(m *Model, rm *modelHCL) {
	fileAt, _ := d.Given(rm.Body, "file")
	m.Weights = d.weightsSource(weightsOwner{
		who: fmt.Sprintf("model %q", m.Name), owner: "model", body: rm.Body,
		source: m.Source, file: m.File, fileAt: fileAt, bytes: &m.WeightsBytes,
	}, rm.Weights)
}

// weightsOwner is what a weights block belongs to: a model, or one of its
// adapters, whose source attribute names the hub repository.
type weightsOwner struct {
	// who starts each error: `model "m"` or `model "m": adapter "a"`.
	who string
	// owner is "model" or "adapter", in the errors' words.
	owner string
	// body is the owner's block, where its source (and file) are.
	body   hcl.Body
	source string
	// file is the model's file, the hub repository's one file when the
	// block names no files ("" for an adapter, which names them);
	// fileAt is where it is.
	file   string
	fileAt hcl.Range
	// bytes is where weights.bytes goes; nil where the block may not give
	// it (an adapter's: nothing places by its size).
	bytes *int64
}

// weightsSource builds the source a weights block names, each problem at
// the line of the field at fault:
//
//   - a hub repository (neither urls nor path): the repository is the
//     owner's source, at revision ("main" when not given), the files
//     named by files, else the model's file;
//   - urls, each file's sha256 (sha256, keyed by the file's name) checked
//     when given;
//   - path: the files are already on every node.
//
// bytes, when given and the owner takes it, is the weights' size
// (Model.WeightsBytes). The source built is then checked whole with
// weightsapi's Validate, its problems put at the field they name, in the
// catalog's words. Nil when anything was wrong.
func (d *decoder) weightsSource(o weightsOwner, rw *weightsHCL) *weightsapi.Source {
	b := rw.Body
	at := func(name string) hcl.Range {
		if r, ok := d.Given(b, name); ok {
			return r
		}
		return rw.DefRange
	}
	bad := func(r hcl.Range, format string, args ...any) {
		d.errorf(r, "%s: %s", o.who, fmt.Sprintf(format, args...))
	}
	before := len(d.errs)
	undecoded := false // a field given whose value did not decode (reported)
	for _, f := range []string{"revision", "files", "urls", "sha256", "path", "bytes"} {
		if _, ok := d.Given(b, f); d.Has(b, f) && !ok {
			undecoded = true
		}
	}
	// Fields given whose values did not decode were reported; Has still
	// says they were written, which is what decides the kind of source.
	urls, path := d.Has(b, "urls"), d.Has(b, "path")
	if urls && path {
		bad(at("path"), "weights: urls and path are both given: give one (urls: files fetched over HTTP(S); path: the weights already on every node)")
	}
	if urls || path {
		other := "urls"
		if path {
			other = "path"
		}
		for _, f := range []string{"files", "revision"} {
			if d.Has(b, f) {
				bad(at(f), "weights.%s is for a hub repository (the %s's source); with %s, leave it out", f, o.owner, other)
			}
		}
	}
	if d.Has(b, "sha256") && !urls {
		bad(at("sha256"), "weights.sha256 is only for urls (each file's sha256, keyed by its name)")
	}
	if r, ok := d.Given(b, "bytes"); ok {
		switch {
		case o.bytes == nil:
			bad(r, "weights.bytes is only for a model's weights (the planner's estimate of their fetch); leave it out")
		case rw.Bytes < 1 || rw.Bytes > maxWeightsBytes:
			bad(r, "weights.bytes must be between 1 and %d, got %d", int64(maxWeightsBytes), rw.Bytes)
		default:
			*o.bytes = rw.Bytes
		}
	}
	var src weightsapi.Source
	// filesAt is the field a hub's files came from: files, or the model's file.
	filesName, filesAt := "weights.files", at("files")
	switch {
	case urls && path:
		// reported above
	case path:
		src.Path = rw.Path
	case urls:
		src.URLs = d.weightsURLs(rw, bad, at)
	default:
		hub := &weightsapi.Hub{Repo: o.source, Revision: rw.Revision, Files: rw.Files}
		if !d.Has(b, "files") {
			switch {
			case o.file != "":
				hub.Files = []string{o.file}
				filesName, filesAt = "file", o.fileAt
			case o.bytes != nil:
				bad(rw.DefRange, "weights: name the hub repository's files (files = [\"*.safetensors\", \"config.json\"]), or give the model's file")
			default:
				bad(rw.DefRange, "weights: name the hub repository's files (files = [\"adapter.gguf\"] for llama.cpp; a PEFT adapter's, [\"adapter_config.json\", \"adapter_model.safetensors\"], for vLLM and SGLang)")
			}
		}
		if o.source == "" {
			bad(rw.DefRange, "weights: a hub repository's files need the %s's source, the repository (\"org/name\"); or give urls or path", o.owner)
		}
		src.Hub = hub
	}
	if undecoded || len(d.errs) > before {
		return nil
	}
	if err := src.Validate(); err != nil {
		msg := err.Error()
		sourceAt, _ := d.Given(o.body, "source")
		for _, f := range []struct {
			prefix, name string
			r            hcl.Range
		}{
			{"weights.hub.repo", "source", sourceAt},
			{"weights.hub.revision", "weights.revision", at("revision")},
			{"weights.hub.files", filesName, filesAt},
			{"weights.urls", "weights.urls", at("urls")},
			{"weights.path", "weights.path", at("path")},
		} {
			if rest, ok := strings.CutPrefix(msg, f.prefix); ok {
				bad(f.r, "%s%s", f.name, rest)
				return nil
			}
		}
		bad(rw.DefRange, "%s", msg)
		return nil
	}
	return &src
}

// weightsURLs builds the URL sources of a weights block: one per URL, with
// its file's sha256 from sha256 when given. A sha256 that names no file of
// urls, or is not one, is reported at sha256.
func (d *decoder) weightsURLs(rw *weightsHCL, bad func(hcl.Range, string, ...any), at func(string) hcl.Range) []weightsapi.URL {
	if len(rw.URLs) == 0 {
		if _, ok := d.Given(rw.Body, "urls"); ok {
			bad(at("urls"), "weights.urls: name at least one URL")
		}
		return nil
	}
	out := make([]weightsapi.URL, 0, len(rw.URLs))
	var names []string
	for _, u := range rw.URLs {
		wu := weightsapi.URL{URL: u}
		name, err := wu.FileName()
		if err == nil {
			names = append(names, name)
			wu.SHA256 = rw.SHA256[name]
		}
		out = append(out, wu) // a bad URL: Validate names it
	}
	for _, name := range slices.Sorted(maps.Keys(rw.SHA256)) {
		sum := rw.SHA256[name]
		switch {
		case !slices.Contains(names, name):
			bad(at("sha256"), "weights.sha256: %q is not the file name of any of urls (%s)", name, strings.Join(names, ", "))
		case !weightsapi.IsSHA256(sum):
			bad(at("sha256"), "weights.sha256[%q]: %q is not a sha256 (64 lower-case hex digits)", name, sum)
		}
	}
	return out
}

// warmSpares reads warm_spares: 0 to MaxWarmSpares, and only for weights
// a node fetches (a weights block that is not a path).
func (d *decoder) warmSpares(m *Model, rm *modelHCL) {
	b := rm.Body
	if !d.intIn(b, "warm_spares", rm.WarmSpares, &m.WarmSpares, 0, MaxWarmSpares) || m.WarmSpares == 0 {
		return
	}
	r, _ := d.Given(b, "warm_spares")
	switch {
	case rm.Weights == nil:
		d.errorf(r, "model %q: warm_spares needs a weights block: a spare keeps the model's weights fetched", m.Name)
		m.WarmSpares = 0
	case d.Has(rm.Weights.Body, "path"):
		d.errorf(r, "model %q: warm_spares: the weights are a path already on every node, nothing to keep warm", m.Name)
		m.WarmSpares = 0
	}
}

// validateWeights is Catalog.Validate's part for a model's weights.
func (m Model) validateWeights() []string {
	var out []string
	if m.Weights != nil {
		if err := m.Weights.Validate(); err != nil {
			out = append(out, err.Error())
		}
	}
	if m.WeightsBytes < 0 || m.WeightsBytes > maxWeightsBytes {
		out = append(out, fmt.Sprintf("weights bytes must be between 0 and %d, got %d", int64(maxWeightsBytes), m.WeightsBytes))
	}
	if err := checkInt("warm_spares", m.WarmSpares, 0, MaxWarmSpares); err != nil {
		out = append(out, err.Error())
	} else if m.WarmSpares > 0 && (m.Weights == nil || m.Weights.Key() == "") {
		out = append(out, "warm_spares needs weights a node fetches (a hub repository or urls)")
	}
	return out
}

// nodeWeights reads a fleet node's weights (key = bytes, as the driver's
// attributes driver.llmgw.weights.<key> give them) and
// fetch_bytes_per_second, each problem at its line.
func (d *decoder) nodeWeights(b hcl.Body, rn nodeHCL, n *Node) {
	if r, ok := d.Given(b, "weights"); ok {
		for _, k := range slices.Sorted(maps.Keys(rn.Weights)) {
			if err := checkHeldWeights(k, rn.Weights[k]); err != nil {
				d.errorf(r, "%v", err)
				continue
			}
			if n.Weights == nil {
				n.Weights = make(map[string]int64, len(rn.Weights))
			}
			n.Weights[k] = rn.Weights[k]
		}
	}
	if r, ok := d.Given(b, "fetch_bytes_per_second"); ok {
		if err := checkFetchRate(rn.FetchBytesPerSecond); err != nil {
			d.errorf(r, "%v", err)
		} else {
			n.FetchBytesPerSecond = rn.FetchBytesPerSecond
		}
	}
}

// weightsKeyRE is what weightsapi's Key gives: its Sanitize's letters,
// digits, '-' and '_', with a hash after the readable part.
var weightsKeyRE = regexp.MustCompile(`^[a-z0-9_-]{1,160}$`)

// checkHeldWeights checks one entry of a node's weights.
func checkHeldWeights(key string, bytes int64) error {
	if !weightsKeyRE.MatchString(key) {
		return fmt.Errorf("weights: %q is not a weights key (lower-case letters, digits, '-' and '_', as the driver's attributes driver.llmgw.weights.<key> name them)", key)
	}
	if bytes < 1 || bytes > maxWeightsBytes {
		return fmt.Errorf("weights[%q]: bytes must be between 1 and %d, got %d", key, int64(maxWeightsBytes), bytes)
	}
	return nil
}

// maxFetchRate bounds fetch_bytes_per_second: 1 TB/s.
const maxFetchRate = 1e12

// checkFetchRate checks a node's fetch_bytes_per_second.
func checkFetchRate(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return errors.New("fetch_bytes_per_second must be a finite number")
	case v <= 0:
		return fmt.Errorf("fetch_bytes_per_second must be positive, got %v", v)
	case v > maxFetchRate:
		return fmt.Errorf("fetch_bytes_per_second %v is out of range (at most %v)", v, maxFetchRate)
	}
	return nil
}
