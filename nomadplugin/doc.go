// Package nomadplugin speaks HashiCorp Nomad's external plugin protocol
// (go-plugin over gRPC) through llmgw's own protobuf definitions in pb/, so
// that llmgw never depends on the BUSL-licensed github.com/hashicorp/nomad
// module.
//
// It holds what both of llmgw's plugins need: the go-plugin handshake and
// Serve functions for a device or a driver plugin, the client-side plugin
// set used by the plugintest harness, decoding of the cty-msgpack
// configuration Nomad sends into Go structs, and the RecoverableError status
// detail. Schema builders live in the hclspec subpackage.
//
// The wire facts this code follows are collected in docs/plugin-wire.md in
// the repository; the e2e suite checks them against a real Nomad agent.
package nomadplugin
