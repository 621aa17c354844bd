package config

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/bounded"
)

func TestRegistration(t *testing.T) {
	tests := []struct {
		name, advertise, listen string
		wantAddr, wantCheck     string
		wantPort                int
		wantErr                 bool
	}{
		{"unspecified listen host", "", "[::]:8080", "", "http://127.0.0.1:8080/healthz", 8080, false},
		{"specific listen host", "", "10.1.2.3:8080", "10.1.2.3", "http://10.1.2.3:8080/healthz", 8080, false},
		{"advertised", "gw.example:443", "[::]:8080", "gw.example", "http://gw.example:443/healthz", 443, false},
		{"bad advertise", "gw.example", "[::]:8080", "", "", 0, true},
		{"bad advertised port", "gw:0", "[::]:8080", "", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.ResolveTCPAddr("tcp", tt.listen)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRegistration(tt.advertise, ln)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got := [3]string{r.Address, r.CheckURL, strconv.Itoa(r.Port)}
			want := [3]string{tt.wantAddr, tt.wantCheck, strconv.Itoa(tt.wantPort)}
			if diff := cmp.Diff(want, got); diff != "" || !strings.HasPrefix(r.ID, "llmgw-gateway-") {
				t.Errorf("id %q (-want +got):\n%s", r.ID, diff)
			}
		})
	}
}

// ReadFile refuses a file past bounded.MaxFileBytes, naming the path and
// the limit, without reading it whole.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(small, []byte("attempts = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(small); err != nil || string(b) != "attempts = 2\n" {
		t.Errorf("small file: %q, %v", b, err)
	}
	big := filepath.Join(dir, "big.hcl")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(bounded.MaxFileBytes + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	_, err = ReadFile(big)
	if !bounded.IsLimit(err) || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), strconv.Itoa(bounded.MaxFileBytes)) {
		t.Errorf("file over the limit: %v; want the size limit, naming the path and %d", err, bounded.MaxFileBytes)
	}
}

// A configuration file nested past the limit is refused with its line,
// before HCL's parser sees it.
func TestParseDeepFile(t *testing.T) {
	src := "register_tags = " + strings.Repeat("[", 100000) + "\n"
	_, err := Parse("gateway.hcl", []byte(src), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "gateway.hcl:1") || !strings.Contains(err.Error(), "64") {
		t.Errorf("got %v; want the depth limit at gateway.hcl:1", err)
	}
}
