package fakeengine

import (
	"errors"
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
			err := CheckGPUs(cfg, tt.cvd, tt.set)
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
