package config

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// A configuration file nested past the limit is refused with its line,
// before HCL's parser sees it.
func TestParseDeepFile(t *testing.T) {
	src := "register_tags = " + strings.Repeat("[", 100000) + "\n"
	_, err := Parse("gateway.hcl", []byte(src), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "gateway.hcl:1") || !strings.Contains(err.Error(), "64") {
		t.Errorf("got %v; want the depth limit at gateway.hcl:1", err)
	}
}
