// Package conformance holds internal/testing/nomadfake to a real Nomad:
// every behaviour the fake claims to model (its package doc lists them) is
// a case here, an exported function taking a *testing.T and a *Target,
// that talks to Nomad only through the real API client
// github.com/hashicorp/nomad/api and the target's few hooks (a clock to
// move, a device to break, a node to take down).
//
// The same cases run twice: against nomadfake in this package's own test
// (`go test ./internal/testing/nomadfake/...`, part of `make test`), and
// against Nomad 2.0.5 agents on loopback in e2e/conformance_test.go
// (TestNomadFakeConformance, when NOMAD_BIN is set). A case that fails on
// the real agent is a fault of the fake (fix the fake, never the
// assertion); one that fails only on the fake is the same.
//
// Cases run in the order of Cases on one target, each with its own job
// IDs, variable paths and meta keys, leaving nothing live behind;
// NodeDownLosesAllocations, which ends a node for good, runs last.
package conformance
