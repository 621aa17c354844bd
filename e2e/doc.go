// Package e2e holds the real-Nomad tier: tests that start a Nomad server
// and clients from NOMAD_BIN on loopback, load llmgw's real plugin
// binaries, and check what Nomad itself reports. Without NOMAD_BIN every
// test skips with a message; TestGatewayOverRealConsul also needs a Consul
// agent binary in CONSUL_BIN. Helpers live in e2e/nomadtest.
package e2e
