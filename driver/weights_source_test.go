package driver

import (
	"strings"
	"testing"
)

// A task's weights block as a source: URLs with their sha256 by the
// store's file name, a hub repository with model_file by default, and
// what is wrong named by its field.
func TestWeightsSource(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	src, err := weightsSource(TaskConfig{Model: "ignored", Weights: &WeightsConfig{
		URLs: []string{"https://h/x/m.gguf?sig=1", "https://h/x/t.json"}, SHA256: map[string]string{"m.gguf": sum}}})
	if err != nil || len(src.URLs) != 2 || src.URLs[0].SHA256 != sum || src.URLs[1].SHA256 != "" {
		t.Errorf("urls: %+v, %v", src, err)
	}
	src, err = weightsSource(TaskConfig{Model: "org/m", ModelFile: "m.gguf", Weights: &WeightsConfig{Revision: "v2"}})
	if err != nil || src.Hub == nil || src.Hub.Repo != "org/m" || src.Hub.Revision != "v2" || len(src.Hub.Files) != 1 || src.Hub.Files[0] != "m.gguf" {
		t.Errorf("hub: %+v, %v", src.Hub, err)
	}
	for _, c := range []struct {
		w    WeightsConfig
		tc   TaskConfig
		want string
	}{
		{WeightsConfig{URLs: []string{"https://h/m.gguf"}, SHA256: map[string]string{"other.gguf": sum}}, TaskConfig{}, `weights.sha256: "other.gguf" names no file of urls`},
		{WeightsConfig{URLs: []string{"ftp://h/m.gguf"}}, TaskConfig{}, "weights.urls[0]: url"},
		{WeightsConfig{SHA256: map[string]string{"m.gguf": sum}}, TaskConfig{Model: "org/m", ModelFile: "m.gguf"}, "weights.sha256: only for urls"},
		{WeightsConfig{}, TaskConfig{Model: "org/m"}, "weights.hub.files"},
		{WeightsConfig{}, TaskConfig{Model: "/abs/path", ModelFile: "m.gguf"}, "weights.hub.repo"},
	} {
		c.tc.Weights = &c.w
		if _, err := weightsSource(c.tc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.w, err, c.want)
		}
	}
}
