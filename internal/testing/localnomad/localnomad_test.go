package localnomad

import (
	"regexp"
	"testing"
)

// consulBlock matches the consul block clientConfig writes.
var consulBlock = regexp.MustCompile(`(?s)\nconsul \{(.*?)\n\}`)

func TestClientConfigConsulAddress(t *testing.T) {
	a := &Agent{Name: "c", Dir: "/tmp/c", HTTP: 1, RPC: 2, Serf: 3}
	srv := &Agent{Name: "server", RPC: 4}
	for _, tc := range []struct {
		consul string
		want   string // the address line in the consul block, "" for none
	}{
		{"", ""},
		{"127.0.0.1:8501", `address = "127.0.0.1:8501"`},
	} {
		cfg := clientConfig(a, srv, ClientOptions{Name: "c", Consul: tc.consul}, 0)
		m := consulBlock.FindStringSubmatch(cfg)
		if m == nil {
			t.Fatalf("Consul %q: no consul block in\n%s", tc.consul, cfg)
		}
		got := regexp.MustCompile(`address\s*=\s*"[^"]*"`).FindString(m[1])
		if got != tc.want {
			t.Errorf("Consul %q: consul block's address %q, want %q:\n%s", tc.consul, got, tc.want, m[0])
		}
	}
}
