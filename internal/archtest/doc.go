// Package archtest holds tests that enforce llmgw's architecture: what the
// module may depend on (no BUSL Nomad module), what production binaries may
// link (no test code), which packages stay pure (their own imports, and
// what they link at any depth), that the nomadplugin SDK links nothing else
// of llmgw, that no production package imports a test double, what each
// part of the tree links of the others (the layer matrix), that every
// package has one package comment, and that the layout tables and the
// package map in README.md and docs/architecture.md match the tree.
// docs/architecture.md lists the rules. It has no non-test code.
package archtest
