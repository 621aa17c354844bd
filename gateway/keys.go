package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/internal/blockingquery"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/hcldecode"
)

// KeyHashPrefix begins every stored key hash: "sha256:" and the SHA-256 of
// the secret, in lower-case hex.
const KeyHashPrefix = "sha256:"

// DefaultReserveTokens is the completion tokens a request that sets no
// max_tokens (nor max_completion_tokens) reserves of its key's tokens per
// minute until its answer's usage settles it.
const DefaultReserveTokens = 256

// KeysItem is the item of a Nomad Variable that holds the key file's text.
const KeysItem = "keys"

// HashKey is the stored form of a secret key: KeyHashPrefix and its
// SHA-256 in hex.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return KeyHashPrefix + hex.EncodeToString(sum[:])
}

// Key is one API key of a key file: its name, the models it may use and
// its limits. A limit of 0 is none.
type Key struct {
	Name string
	// Models are the models the key may use; nil: every model.
	Models map[string]bool
	// RequestsPerMinute, TokensPerMinute and MaxConcurrency are the key's
	// limits in this gateway (see KeySet.Share); 0: unlimited.
	RequestsPerMinute int64
	TokensPerMinute   int64
	MaxConcurrency    int64
	// ReserveTokens is reserved for the completion of a request that says
	// no max_tokens.
	ReserveTokens int64
	// At is where the key is declared: "file:line".
	At string

	// Set by the gateway when the set is installed: the key's limiter and
	// its counters.
	lim                                      *keyLimiter
	admitted, promptTokens, completionTokens prometheus.Counter
}

// Allows reports whether k may use model.
func (k *Key) Allows(model string) bool { return k.Models == nil || k.Models[model] }

// KeySet is a parsed key file: the keys by the hash of their secret.
type KeySet struct {
	// Source names where the set was read: the file, or the variable.
	Source string
	byHash map[[sha256.Size]byte]*Key
	keys   []*Key // in the order of the file
}

// Keys returns the keys in the order of the file.
func (s *KeySet) Keys() []*Key { return slices.Clone(s.keys) }

// Len is the number of keys.
func (s *KeySet) Len() int { return len(s.keys) }

// lookup finds the key whose secret is presented. It hashes the presented
// secret and looks the hash up: no comparison of secrets, so nothing to
// time.
func (s *KeySet) lookup(secret string) *Key {
	return s.byHash[sha256.Sum256([]byte(secret))]
}

// UnknownModels returns, for each key, the models of its allowlist that
// known does not report: the key file names them, the catalog does not
// (yet). They are warnings: the key file stands.
func (s *KeySet) UnknownModels(known func(string) bool) []string {
	var out []string
	for _, k := range s.keys {
		for _, m := range slices.Sorted(mapKeys(k.Models)) {
			if !known(m) {
				out = append(out, fmt.Sprintf("%s: key %q: model %q is not in the catalog", k.At, k.Name, m))
			}
		}
	}
	return out
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// keyFileHCL is the key file's schema.
type keyFileHCL struct {
	Keys []keyHCL `hcl:"key,block"`
	Body hcl.Body `hcl:",body"`
}

type keyHCL struct {
	Name              string    `hcl:"name,label"`
	Hash              string    `hcl:"hash"`
	Models            []string  `hcl:"models,optional"`
	RequestsPerMinute int64     `hcl:"requests_per_minute,optional"`
	TokensPerMinute   int64     `hcl:"tokens_per_minute,optional"`
	MaxConcurrency    int64     `hcl:"max_concurrency,optional"`
	ReserveTokens     int64     `hcl:"reserve_tokens,optional"`
	Body              hcl.Body  `hcl:",body"`
	DefRange          hcl.Range `hcl:",def_range"`
}

// ParseKeys parses a key file's contents:
//
//	key "team-a" {
//	  hash                = "sha256:…"          # HashKey of the secret
//	  models              = ["llama-3.1-8b"]     # optional: every model when absent
//	  requests_per_minute = 600                  # optional limits, each at least 1
//	  tokens_per_minute   = 200000
//	  max_concurrency     = 16
//	  reserve_tokens      = 256                  # optional: DefaultReserveTokens
//	}
//
// Every problem is an error naming filename:line, all of them joined; a
// file with any problem gives no set.
func ParseKeys(filename string, src []byte) (*KeySet, error) {
	var raw keyFileHCL
	f, ok := hcldecode.Decode(filename, src, nil, &raw)
	if ok {
		checkKeys(f, &raw)
	}
	if ps := f.Problems(); len(ps) > 0 {
		errs := make([]error, len(ps))
		for i := range ps {
			errs[i] = &ps[i]
		}
		return nil, errors.Join(errs...)
	}
	s := &KeySet{Source: filename, byHash: map[[sha256.Size]byte]*Key{}}
	for _, kh := range raw.Keys {
		var sum [sha256.Size]byte
		_, _ = hex.Decode(sum[:], []byte(strings.TrimPrefix(kh.Hash, KeyHashPrefix)))
		k := &Key{Name: kh.Name, RequestsPerMinute: kh.RequestsPerMinute, TokensPerMinute: kh.TokensPerMinute,
			MaxConcurrency: kh.MaxConcurrency, ReserveTokens: kh.ReserveTokens,
			At: fmt.Sprintf("%s:%d", filename, max(kh.DefRange.Start.Line, 1))}
		if _, given := f.Given(kh.Body, "reserve_tokens"); !given {
			k.ReserveTokens = DefaultReserveTokens
		}
		if _, given := f.Given(kh.Body, "models"); given {
			k.Models = map[string]bool{}
			for _, m := range kh.Models {
				k.Models[m] = true
			}
		}
		s.byHash[sum] = k
		s.keys = append(s.keys, k)
	}
	return s, nil
}

// checkKeys files what gohcl cannot check: names, hashes, limits, models.
func checkKeys(f *hcldecode.File, raw *keyFileHCL) {
	names := map[string]string{}
	hashes := map[string]string{}
	for _, k := range raw.Keys {
		at := k.DefRange
		switch {
		case !validKeyName(k.Name):
			f.Errorf(at, "key %q: a key's name is 1 to 64 letters, digits and -_.", k.Name)
		case names[k.Name] != "":
			f.Errorf(at, "key %q: declared twice (first at line %s)", k.Name, names[k.Name])
		default:
			names[k.Name] = fmt.Sprint(at.Start.Line)
		}
		if r, given := f.Given(k.Body, "hash"); given {
			h := strings.TrimPrefix(k.Hash, KeyHashPrefix)
			b, err := hex.DecodeString(h)
			switch {
			case !strings.HasPrefix(k.Hash, KeyHashPrefix) || err != nil || len(b) != sha256.Size || h != strings.ToLower(h):
				f.Errorf(r, "key %q: hash: want %q and 64 lower-case hex digits (llmgw gateway hash-key makes one), not a secret", k.Name, KeyHashPrefix)
			case hashes[k.Hash] != "":
				f.Errorf(r, "key %q: hash: the same secret as key %q", k.Name, hashes[k.Hash])
			default:
				hashes[k.Hash] = k.Name
			}
		}
		for _, l := range []struct {
			attr string
			v    int64
		}{{"requests_per_minute", k.RequestsPerMinute}, {"tokens_per_minute", k.TokensPerMinute},
			{"max_concurrency", k.MaxConcurrency}} {
			if r, given := f.Given(k.Body, l.attr); given && l.v < 1 {
				f.Errorf(r, "key %q: %s: %d: want at least 1 (leave it out for no limit)", k.Name, l.attr, l.v)
			}
		}
		if r, given := f.Given(k.Body, "reserve_tokens"); given && k.ReserveTokens < 0 {
			f.Errorf(r, "key %q: reserve_tokens: %d: want 0 or more", k.Name, k.ReserveTokens)
		}
		if r, given := f.Given(k.Body, "models"); given {
			if len(k.Models) == 0 {
				f.Errorf(r, "key %q: models: empty: the key could use no model (leave models out for every model)", k.Name)
			}
			seen := map[string]bool{}
			for i, m := range k.Models {
				switch {
				case !validModelName(m):
					f.Errorf(r, "key %q: models[%d]: %q is not a model name (empty, or spaces or control characters)", k.Name, i, m)
				case seen[m]:
					f.Errorf(r, "key %q: models[%d]: %q listed twice", k.Name, i, m)
				}
				seen[m] = true
			}
		}
	}
}

func validKeyName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

func validModelName(m string) bool {
	if m == "" || len(m) > 256 {
		return false
	}
	for _, c := range m {
		if unicode.IsSpace(c) || unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// KeySource publishes the API keys: publish(set, nil) every time they
// change, publish(nil, err) when they cannot be read or parsed (the keys
// in force stay). publish is not called concurrently.
type KeySource interface {
	Run(ctx context.Context, publish func(*KeySet, error)) error
}

// StaticKeys publishes one fixed set: for tests and benchmarks.
type StaticKeys struct{ Set *KeySet }

// Run publishes the set and waits for ctx.
func (s StaticKeys) Run(ctx context.Context, publish func(*KeySet, error)) error {
	publish(s.Set, nil)
	<-ctx.Done()
	return nil
}

// DefaultKeysInterval is how often FileKeys looks at its file.
const DefaultKeysInterval = 5 * time.Second

// FileKeys reads a key file, and again whenever its contents change
// (looked at every Interval) or Reload receives.
type FileKeys struct {
	Path string
	// Interval between looks at the file; DefaultKeysInterval when 0.
	Interval time.Duration
	// Reload, when not nil, reads the file at once (SIGHUP).
	Reload <-chan struct{}
}

// Run reads the file until ctx ends. Contents already tried are not parsed
// again, so a bad file is reported once per change; Reload always reads.
func (s *FileKeys) Run(ctx context.Context, publish func(*KeySet, error)) error {
	every := s.Interval
	if every <= 0 {
		every = DefaultKeysInterval
	}
	var last []byte
	tried := false
	look := func(force bool) {
		src, err := bounded.ReadFile(s.Path)
		if err != nil {
			publish(nil, fmt.Errorf("read key file: %w", err))
			tried, last = false, nil
			return
		}
		if tried && !force && bytes.Equal(src, last) {
			return
		}
		tried, last = true, src
		ks, err := ParseKeys(s.Path, src)
		publish(ks, err)
	}
	look(true)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			look(false)
		case <-s.Reload:
			look(true)
		}
	}
}

// NomadKeys reads the key file's text from the item KeysItem of a Nomad
// Variable with a blocking query: a change reaches the gateway as soon as
// Nomad has it. A variable that does not exist, or one that does not
// parse, is an error: the keys in force stay (none, before the first good
// read: every request is refused).
type NomadKeys struct {
	Client *nomadapi.Client
	Logger *slog.Logger
	// Namespace of the variable; "default" when empty.
	Namespace string
	Path      string
	// Wait bounds each blocking query; 5 minutes by default.
	Wait time.Duration
}

// Run watches the variable until ctx ends.
func (s *NomadKeys) Run(ctx context.Context, publish func(*KeySet, error)) error {
	ns := s.Namespace
	if ns == "" {
		ns = nomadapi.DefaultNamespace
	}
	where := fmt.Sprintf("nomad variable %s (namespace %s)", s.Path, ns)
	w := blockingquery.Watch[*nomadapi.Variable]{
		Wait:    s.Wait,
		Backoff: discoveryBackoff(),
		Fetch: blockingquery.Nomad(func(q *nomadapi.QueryOptions) (*nomadapi.Variable, *nomadapi.QueryMeta, error) {
			q.Namespace = ns
			return s.Client.Variables().Peek(s.Path, q)
		}),
		OnAnswer: func(v *nomadapi.Variable, _ uint64) {
			if v == nil {
				publish(nil, fmt.Errorf("%s: not found", where))
				return
			}
			src, ok := v.Items[KeysItem]
			if !ok {
				publish(nil, fmt.Errorf("%s: no item %q", where, KeysItem))
				return
			}
			ks, err := ParseKeys(where+" item "+KeysItem, []byte(src))
			publish(ks, err)
		},
		OnError: func(err error, _ time.Duration) {
			publish(nil, fmt.Errorf("read %s: %w", where, err))
		},
	}
	w.Run(ctx)
	return nil
}
