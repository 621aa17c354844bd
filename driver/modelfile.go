package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// modelCacheDir is the model cache an engine of the task sees: HF_HOME as
// the engine's environment will have it (the task's env, Nomad's task
// environment, the plugin's extra_env), else the plugin's model_cache.
func modelCacheDir(conf Config, task *driverpb.TaskConfig, tc TaskConfig) string {
	for _, m := range []map[string]string{tc.Env, task.GetEnv(), conf.ExtraEnv} {
		if v, ok := m[envHFHome]; ok {
			return v
		}
	}
	return conf.ModelCache
}

// resolveModelFile finds the local file an engine that loads one
// (llama.cpp) is given, from the task's model and model_file:
//
//   - model an absolute path, no model_file: that file;
//   - model an absolute directory: model_file within it;
//   - model a Hugging Face repository ("org/name") with model_file: the
//     file as `hf download org/name FILE` leaves it with HF_HOME = the
//     model cache, <cache>/hub/models--org--name/snapshots/<revision>/FILE
//     (the revision refs/main names first, then the others by name), else
//     as a --local-dir download into <cache>/org/name/FILE;
//   - model a relative path, no model_file: <cache>/<model>.
//
// A file that is not there is an error naming the field, the model cache
// and where it looked, before anything starts.
func resolveModelFile(model, file, cache string) (string, error) {
	field, name := "model_file", file
	if file == "" {
		field, name = "model", model
	}
	var candidates []string
	var where string
	switch {
	case filepath.IsAbs(model) && file == "":
		candidates = []string{model}
	case filepath.IsAbs(model):
		candidates = []string{filepath.Join(model, file)}
	case cache == "":
		return "", fmt.Errorf("%s: model file %q of %q: no model_cache in the plugin config (nor HF_HOME in the task's env) to find it under", field, name, model)
	case file == "":
		candidates = []string{filepath.Join(cache, model)}
		where = fmt.Sprintf(" under model_cache %s", cache)
	default:
		repo := filepath.Join(cache, "hub", "models--"+strings.ReplaceAll(model, "/", "--"))
		if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
			if rev := strings.TrimSpace(string(ref)); rev != "" && !strings.ContainsAny(rev, `/\`) && rev != ".." {
				candidates = append(candidates, filepath.Join(repo, "snapshots", rev, file))
			}
		}
		if revs, err := os.ReadDir(filepath.Join(repo, "snapshots")); err == nil {
			for _, r := range revs { // sorted by name
				if p := filepath.Join(repo, "snapshots", r.Name(), file); !slices.Contains(candidates, p) {
					candidates = append(candidates, p)
				}
			}
		}
		candidates = append(candidates, filepath.Join(cache, model, file))
		where = fmt.Sprintf(" under model_cache %s (looked for hub/%s/snapshots/*/%s and %s/%s)",
			cache, filepath.Base(repo), file, model, file)
	}
	for _, p := range candidates {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
		if err == nil && len(candidates) == 1 {
			return "", fmt.Errorf("%s: model file %s is not a regular file", field, p)
		}
	}
	if where == "" {
		return "", fmt.Errorf("%s: model file %s not found", field, candidates[0])
	}
	return "", fmt.Errorf("%s: model file %q of %q not found%s", field, name, model, where)
}
