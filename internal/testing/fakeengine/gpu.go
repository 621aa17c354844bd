package fakeengine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrGPUs is returned when CUDA_VISIBLE_DEVICES does not give the engine
// the GPUs the command line asks for.
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

// ResolveGPUs is what a CUDA process would see, given CUDA_VISIBLE_DEVICES
// v (set: whether it is in the environment at all) and CUDA_DEVICE_ORDER
// order. Without c.HostGPUs the entries are returned as they are. With
// them, CUDA's rules apply:
//
//   - unset, every host GPU is visible;
//   - an integer is an index into the host's GPUs, which CUDA numbers in
//     PCI bus order only under CUDA_DEVICE_ORDER=PCI_BUS_ID (its default
//     is fastest first), so an index under any other order is an error;
//   - a GPU-… UUID names that GPU (a unique prefix is enough);
//   - the first entry that names no GPU (out of range, unknown, or
//     repeated) ends the list: only the entries before it are visible;
//   - a MIG-… UUID is visible alone: CUDA shows a process a single MIG
//     instance, so entries after it are not seen.
func ResolveGPUs(c Config, v string, set bool, order string) ([]string, error) {
	entries := VisibleGPUs(v)
	if c.HostGPUs == nil {
		return entries, nil
	}
	if !set {
		return append([]string(nil), c.HostGPUs...), nil
	}
	var out []string
	for _, e := range entries {
		var gpu string
		switch {
		case strings.HasPrefix(e, "MIG-"):
			if len(out) == 0 {
				out = []string{e}
			}
			return out, nil
		case isIndex(e):
			if order != "PCI_BUS_ID" {
				return nil, fmt.Errorf("%w: CUDA_VISIBLE_DEVICES=%q holds indices but CUDA_DEVICE_ORDER=%q: CUDA would number the GPUs fastest first, not by PCI bus as --host-gpus lists them",
					ErrGPUs, v, order)
			}
			i, _ := strconv.Atoi(e)
			if i < len(c.HostGPUs) {
				gpu = c.HostGPUs[i]
			}
		default:
			gpu = byPrefix(c.HostGPUs, e)
		}
		if gpu == "" || slices.Contains(out, gpu) {
			return out, nil
		}
		out = append(out, gpu)
	}
	return out, nil
}

func isIndex(s string) bool {
	_, err := strconv.ParseUint(s, 10, 16)
	return err == nil
}

// byPrefix is the one GPU whose UUID starts with p, or "".
func byPrefix(gpus []string, p string) string {
	found := ""
	for _, g := range gpus {
		if strings.HasPrefix(g, p) {
			if found != "" {
				return ""
			}
			found = g
		}
	}
	return found
}

// CheckGPUs checks the GPUs the engine sees (gpus, from ResolveGPUs; set
// tells whether CUDA_VISIBLE_DEVICES is in the environment at all) against
// the configuration: with --expect-gpus N it must be set and give exactly
// N GPUs; otherwise, when a tensor-parallel size N was given and the
// variable is set, it must give at least N, as a real engine would fail
// without them. v is the variable's value, for the message.
func CheckGPUs(c Config, v string, set bool, gpus []string) error {
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
