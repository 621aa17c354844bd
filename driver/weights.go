package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
	"github.com/llmgw/llmgw/weights"
	"github.com/llmgw/llmgw/weightsapi"
)

// weightsAttrPrefix names, in the node's attributes, each model the node's
// store holds whole: driver.llmgw.weights.<key> = its bytes. Nomad shows
// them in `nomad node status -verbose`, constraints and affinities can use
// them (${attr.driver.llmgw.weights.<key>}), and the controller reads them
// to place replicas where their weights are.
const weightsAttrPrefix = weightsapi.AttrPrefix

// hubTokenFile is where a task's template may put the hub token for a
// gated repository (read from Nomad Variables with the task's workload
// identity): the task's secrets dir, which only the task and the client
// see. Else the task environment's HF_TOKEN (hubTokenEnv), which the
// controller's env_from_variable template sets the same way. The token
// never passes through the job spec, a log or the API.
const (
	hubTokenFile = "secrets/hub-token"
	hubTokenEnv  = "HF_TOKEN"
)

// hubToken is the task's hub token: its secrets/hub-token, else HF_TOKEN
// in the task environment Nomad built (templates included); "" for none.
func hubToken(task *driverpb.TaskConfig) string {
	if b, err := os.ReadFile(filepath.Join(task.GetAllocDir(), task.GetName(), hubTokenFile)); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t
		}
	}
	return task.GetEnv()[hubTokenEnv]
}

// weightsSource is the source a task's weights block names.
func weightsSource(tc TaskConfig) (weights.Source, error) {
	src, err := sourceOf(*tc.Weights, tc.Model, tc.ModelFile)
	if err != nil && src.Hub != nil {
		return weights.Source{}, fmt.Errorf("%w (model names the repository)", err)
	}
	return src, err
}

// sourceOf is the source a weights block w names: its urls, else the hub
// repository repo with w's files, or file alone when w names none (a
// task's model_file). On an error the source is as far as it was built.
func sourceOf(w WeightsConfig, repo, file string) (weights.Source, error) {
	if len(w.URLs) > 0 {
		var src weights.Source
		named := map[string]bool{}
		for _, u := range w.URLs {
			wu := weights.URL{URL: u}
			name, err := wu.FileName() // the store's name for it; Validate says what is wrong
			if err == nil {
				wu.SHA256 = w.SHA256[name]
				named[name] = true
			}
			src.URLs = append(src.URLs, wu)
		}
		if err := src.Validate(); err != nil {
			return src, err
		}
		for name := range w.SHA256 {
			if !named[name] {
				return weights.Source{}, fmt.Errorf("weights.sha256: %q names no file of urls", name)
			}
		}
		return src, nil
	}
	if len(w.SHA256) > 0 {
		return weights.Source{}, errors.New("weights.sha256: only for urls (a hub gives each file's sha256)")
	}
	files := w.Files
	if len(files) == 0 && file != "" {
		files = []string{file}
	}
	src := weights.Source{Hub: &weights.Hub{Repo: repo, Revision: w.Revision, Files: files}}
	return src, src.Validate()
}

// openStore opens the node's model store: model_cache, with the plugin's
// store options.
func openStore(conf Config) (*weights.Store, error) {
	if conf.ModelCache == "" {
		return nil, errors.New("weights: the plugin config sets no model_cache, the node's model store")
	}
	return weights.Open(weights.Config{
		Dir: conf.ModelCache, HubURL: conf.HubURL, BudgetBytes: conf.StoreBudgetBytes,
		MaxConcurrent: conf.MaxConcurrentFetches, BytesPerSecond: conf.FetchBytesPerSecond,
	})
}

// ensureWeights makes the node's store hold the task's weights (fetching
// what is missing, each step a task event) and points the task's model at
// the store's directory, so the engine reads the verified files and
// nothing else.
func ensureWeights(ctx context.Context, conf Config, task *driverpb.TaskConfig, tc *TaskConfig, emit eventFunc) (weights.Model, error) {
	src, err := weightsSource(*tc)
	if err != nil {
		return weights.Model{}, fmt.Errorf("%w: %w", ErrBadTaskConfig, err)
	}
	store, err := openStore(conf)
	if err != nil {
		return weights.Model{}, fmt.Errorf("%w: %w", ErrBadTaskConfig, err)
	}
	m, err := store.Ensure(ctx, src, hubToken(task), func(e weights.Event) { emit(time.Time{}, e.Message, e.Annotations) })
	if err != nil {
		return m, err
	}
	tc.Model = m.Dir
	if tc.ModelFile == "" && len(m.Files) == 1 {
		tc.ModelFile = m.Files[0].Name
	}
	return m, nil
}

// weightsAttributes are the fingerprint's attributes for the models the
// node's store holds whole; prev (what was sent last) gives each model no
// longer held an empty value, which Nomad takes as removing it.
func weightsAttributes(conf Config, prev map[string]*structspb.Attribute) map[string]*structspb.Attribute {
	out := map[string]*structspb.Attribute{}
	if conf.ModelCache == "" {
		return out
	}
	if _, err := os.Stat(filepath.Join(conf.ModelCache, ".llmgw", "models")); err != nil {
		return out // no store here yet: nothing fetched
	}
	store, err := openStore(conf)
	if err != nil {
		return out
	}
	ms, err := store.Models()
	if err != nil {
		return out
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Key < ms[j].Key })
	var latest weights.Model
	for _, m := range ms {
		out[weightsAttrPrefix+m.Key] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: fmt.Sprint(m.Bytes)}}
		if m.Fetch.Bytes >= 8<<20 && m.Fetch.Seconds > 0 && m.FetchedAt.After(latest.FetchedAt) {
			latest = m
		}
	}
	switch {
	case conf.FetchBytesPerSecond > 0:
		out[weightsapi.AttrFetchRate] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: fmt.Sprint(conf.FetchBytesPerSecond)}}
	case latest.Key != "":
		out[weightsapi.AttrFetchRate] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: fmt.Sprint(int64(float64(latest.Fetch.Bytes) / latest.Fetch.Seconds))}}
	}
	for k, v := range prev {
		if _, ok := out[k]; !ok && (strings.HasPrefix(k, weightsAttrPrefix) || k == weightsapi.AttrFetchRate) && v.GetStringVal() != "" {
			out[k] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: ""}}
		}
	}
	return out
}

// storeModified is when the store's records last changed (zero without a
// store).
func storeModified(conf Config) time.Time {
	if conf.ModelCache == "" {
		return time.Time{}
	}
	fi, err := os.Stat(filepath.Join(conf.ModelCache, ".llmgw", "models"))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
