package nomadplugin

import (
	plugin "github.com/hashicorp/go-plugin"
)

// APIVersion is the device and driver plugin API version this package
// implements, the one the Nomad client accepts for both plugin types. List it
// in PluginInfoResponse.PluginApiVersions; SetConfig then carries it as the
// negotiated version.
const APIVersion = "v0.1.0"

// Handshake is the go-plugin handshake a Nomad client performs: application
// protocol 2 and Nomad's magic cookie, which the client sets in the plugin's
// environment so that the binary refuses to run as a plugin for anyone else.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// Plugin-set keys. Nomad uses them only inside its own process to pick a
// client stub; on the wire what matters is that the base service and the
// device or driver service share one gRPC server.
const (
	PluginKeyBase   = "base"   // the BasePlugin service, which every plugin serves
	PluginKeyDevice = "device" // the DevicePlugin service
	PluginKeyDriver = "driver" // the Driver service
)
