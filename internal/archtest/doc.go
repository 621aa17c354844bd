// Package archtest holds tests that enforce llmgw's architecture: what the
// module may depend on and what production binaries may link. It has no
// non-test code.
package archtest
