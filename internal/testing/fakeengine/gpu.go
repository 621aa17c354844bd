package fakeengine

import (
	"errors"
	"fmt"
	"strings"
)

// ErrGPUs is returned when CUDA_VISIBLE_DEVICES does not hold the GPUs the
// command line asks for.
var ErrGPUs = errors.New("GPU check failed")

// VisibleGPUs splits a CUDA_VISIBLE_DEVICES value into its entries (indices
// or UUIDs), dropping empty ones.
func VisibleGPUs(v string) []string {
	var gpus []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			gpus = append(gpus, f)
		}
	}
	return gpus
}

// CheckGPUs checks CUDA_VISIBLE_DEVICES (value v, set tells whether it is in
// the environment at all) against the configuration: with --expect-gpus N
// it must be set and hold exactly N entries; otherwise, when a
// tensor-parallel size N was given and the variable is set, it must hold at
// least N entries, as a real engine would fail without them.
func CheckGPUs(c Config, v string, set bool) error {
	gpus := VisibleGPUs(v)
	switch {
	case c.ExpectGPUs >= 0 && !set:
		return fmt.Errorf("%w: --expect-gpus %d but CUDA_VISIBLE_DEVICES is not set", ErrGPUs, c.ExpectGPUs)
	case c.ExpectGPUs >= 0 && len(gpus) != c.ExpectGPUs:
		return fmt.Errorf("%w: --expect-gpus %d but CUDA_VISIBLE_DEVICES=%q holds %d", ErrGPUs, c.ExpectGPUs, v, len(gpus))
	case c.ExpectGPUs < 0 && c.TensorParallel > 0 && set && len(gpus) < c.TensorParallel:
		return fmt.Errorf("%w: tensor parallel size %d but CUDA_VISIBLE_DEVICES=%q holds %d", ErrGPUs, c.TensorParallel, v, len(gpus))
	}
	return nil
}
