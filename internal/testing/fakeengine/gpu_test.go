package fakeengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVisibleGPUs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"0", []string{"0"}},
		{"0,1, 2,", []string{"0", "1", "2"}},
		{"GPU-8f6c1f3e-0000-0000-0000-000000000000,GPU-1", []string{"GPU-8f6c1f3e-0000-0000-0000-000000000000", "GPU-1"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, VisibleGPUs(tt.in)); diff != "" {
			t.Errorf("VisibleGPUs(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestCheckGPUs(t *testing.T) {
	tests := []struct {
		name   string
		expect int
		tp     int
		cvd    string
		set    bool
		wantOK bool
	}{
		{name: "nothing asked", expect: -1, wantOK: true},
		{name: "expect matches", expect: 2, cvd: "0,1", set: true, wantOK: true},
		{name: "expect zero on empty", expect: 0, cvd: "", set: true, wantOK: true},
		{name: "expect more", expect: 2, cvd: "0", set: true},
		{name: "expect fewer", expect: 1, cvd: "0,1", set: true},
		{name: "expect but unset", expect: 1},
		{name: "expect wins over tp", expect: 1, tp: 4, cvd: "3", set: true, wantOK: true},
		{name: "tp without CUDA_VISIBLE_DEVICES", expect: -1, tp: 8, wantOK: true},
		{name: "tp within", expect: -1, tp: 2, cvd: "4,5,6", set: true, wantOK: true},
		{name: "tp exact", expect: -1, tp: 2, cvd: "4,5", set: true, wantOK: true},
		{name: "tp above", expect: -1, tp: 4, cvd: "4,5", set: true},
		{name: "tp on empty", expect: -1, tp: 1, cvd: "", set: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{ExpectGPUs: tt.expect, TensorParallel: tt.tp}
			err := CheckGPUs(cfg, tt.cvd, tt.set, VisibleGPUs(tt.cvd))
			if tt.wantOK {
				if err != nil {
					t.Errorf("CheckGPUs = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrGPUs) {
				t.Errorf("CheckGPUs = %v, want ErrGPUs", err)
			}
		})
	}
}

func TestResolveGPUs(t *testing.T) {
	host := Config{HostGPUs: []string{"GPU-aa11", "GPU-bb22", "GPU-cc33", "GPU-cc44"}}
	tests := []struct {
		name    string
		cfg     Config
		cvd     string
		unset   bool
		order   string
		want    []string
		wantErr string
	}{
		{name: "no host table: entries as given", cvd: "3,GPU-x", want: []string{"3", "GPU-x"}},
		{name: "indices in PCI order", cfg: host, cvd: "2,0", order: "PCI_BUS_ID", want: []string{"GPU-cc33", "GPU-aa11"}},
		{name: "indices without PCI_BUS_ID", cfg: host, cvd: "1", order: "", wantErr: `CUDA_DEVICE_ORDER="": CUDA would number the GPUs fastest first`},
		{name: "indices fastest first", cfg: host, cvd: "1", order: "FASTEST_FIRST", wantErr: "holds indices"},
		{name: "UUIDs need no order", cfg: host, cvd: "GPU-bb22,GPU-aa11", want: []string{"GPU-bb22", "GPU-aa11"}},
		{name: "unique UUID prefix", cfg: host, cvd: "GPU-bb", want: []string{"GPU-bb22"}},
		{name: "ambiguous prefix ends the list", cfg: host, cvd: "GPU-aa11,GPU-cc,GPU-bb22", want: []string{"GPU-aa11"}},
		{name: "out of range ends the list", cfg: host, cvd: "0,9,1", order: "PCI_BUS_ID", want: []string{"GPU-aa11"}},
		{name: "repeat ends the list", cfg: host, cvd: "1,1,2", order: "PCI_BUS_ID", want: []string{"GPU-bb22"}},
		{name: "one MIG instance", cfg: host, cvd: "MIG-1,MIG-2", want: []string{"MIG-1"}},
		{name: "unset: every GPU", cfg: host, unset: true, want: host.HostGPUs},
		{name: "empty: none", cfg: host, cvd: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveGPUs(tt.cfg, tt.cvd, !tt.unset, tt.order)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrGPUs) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ResolveGPUs = %v, want ErrGPUs containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
