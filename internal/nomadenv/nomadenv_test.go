package nomadenv

import "testing"

func TestAddress(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        map[string]string
		addr, from string
	}{
		{"none", nil, "", ""},
		{"NOMAD_ADDR", map[string]string{"NOMAD_ADDR": "https://n:4646"}, "https://n:4646", "NOMAD_ADDR"},
		{"socket", map[string]string{"NOMAD_UNIX_ADDR": "unix:///s/api.sock"}, "unix:///s/api.sock", "NOMAD_UNIX_ADDR"},
		{"socket before NOMAD_ADDR", map[string]string{"NOMAD_ADDR": "http://127.0.0.1:4646", "NOMAD_UNIX_ADDR": "unix:///s/api.sock"},
			"unix:///s/api.sock", "NOMAD_UNIX_ADDR"},
		{"empty is unset", map[string]string{"NOMAD_ADDR": "http://a:1", "NOMAD_UNIX_ADDR": ""}, "http://a:1", "NOMAD_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, from := Address(func(k string) string { return tc.env[k] })
			if addr != tc.addr || from != tc.from {
				t.Errorf("Address = %q, %q; want %q, %q", addr, from, tc.addr, tc.from)
			}
		})
	}
}
