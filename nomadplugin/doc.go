// Package nomadplugin is a Go SDK for HashiCorp Nomad's external plugins —
// device plugins and task drivers — that does not import
// github.com/hashicorp/nomad.
//
// Nomad's own plugin packages live in the github.com/hashicorp/nomad module,
// which is BUSL-licensed and brings most of the Nomad agent with it. This
// package speaks the same protocol, go-plugin over gRPC, through protobuf
// definitions of its own (the pb/ subpackages) that are wire-compatible with
// the Nomad client, and it depends only on openly licensed modules:
// hashicorp/go-plugin, go-hclog, hcl/v2, go-cty, go-viper/mapstructure, gRPC
// and protobuf. llmgw's device plugin (nomad-device-nvml) and task driver
// (nomad-driver-llmgw) are built on it.
//
// # What it is, and what it is not
//
// It is the transport and the conventions: the handshake, the Serve
// functions, configuration schemas and decoding (package hclspec), the
// recoverable-error convention, a logger the Nomad client understands, and a
// test harness that loads a plugin binary the way a Nomad client does
// (package plugintest).
//
// It is not Nomad's Go plugin API. There is no DriverPlugin or DevicePlugin
// interface of Go types to implement, no task handle helpers, executor,
// log collector or shared drivers code: a plugin implements the generated
// gRPC server interfaces (basepb.BasePluginServer together with
// devicepb.DevicePluginServer or driverpb.DriverServer) and so sees exactly
// what travels on the wire. Running tasks, supervising processes, writing
// Nomad's log FIFOs and recovering tasks stay the driver's own work.
//
// # Protocol versions
//
// Handshake is go-plugin's core protocol 1 and application protocol 2, gRPC
// only, with Nomad's magic cookie in NOMAD_PLUGIN_MAGIC_COOKIE. APIVersion,
// v0.1.0, is the plugin API version the Nomad client accepts for both device
// and driver plugins; PluginInfo must list it. The protocol is checked against
// Nomad 2.0.5 by llmgw's e2e suite. The facts the code follows are written
// down in docs/plugin-wire.md in the repository (github.com/llmgw/llmgw).
//
// # Serving a device plugin
//
// Embed basepb.UnimplementedBasePluginServer and
// devicepb.UnimplementedDevicePluginServer in a type and implement:
//
//   - PluginInfo: Type DEVICE, PluginApiVersions listing APIVersion, a
//     PluginVersion that parses as a semantic version, and the plugin's Name
//     (a plugin is known by its name and type);
//   - ConfigSchema and SetConfig (see the configuration section below);
//   - Fingerprint: the device groups at once, then a message whenever they
//     change. Keep the stream open for the plugin's life: the Nomad client
//     drops every device of a plugin whose stream ends or fails, so report
//     trouble as an unhealthy device with a description instead;
//   - Reserve: what a task needs to use the given device IDs (environment,
//     mounts, device nodes);
//   - Stats: per-device statistics at the requested interval.
//
// Then serve it from main with ServeDevice, which blocks until the Nomad
// client is done with the plugin:
//
//	func main() {
//		p := newPlugin()
//		nomadplugin.ServeDevice(p, p, nomadplugin.NewLogger("nomad-device-example"))
//	}
//
// # Serving a driver plugin
//
// The same with driverpb.UnimplementedDriverServer and ServeDriver: PluginInfo
// with Type DRIVER, TaskConfigSchema, Capabilities, Fingerprint (a stream of
// the driver's health, kept open), and the task lifecycle: StartTask,
// WaitTask, StopTask, DestroyTask, InspectTask, RecoverTask, TaskEvents.
// What the Nomad client expects of them:
//
//   - StartTask fails with a gRPC error; the response's result and error
//     message fields are ignored. It returns a TaskHandle that echoes the
//     task's config (a handle without one is not recovered) and carries in
//     DriverState everything needed to find the task again.
//   - The client persists that handle and calls RecoverTask with it after it
//     restarts or the plugin crashes; RecoverTask must be idempotent.
//   - A graceful client shutdown kills the plugin, so tasks must not depend
//     on the plugin's process.
//   - WaitTask may be called many times, also after the task has exited.
//
// # Configuration: hclspec and msgpack
//
// A plugin describes its agent configuration (ConfigSchema) and its task
// configuration (TaskConfigSchema) as a schema built with package hclspec:
// hclspec.Object, Attr, Default, Block and so on. The Nomad client evaluates
// the HCL `config {}` block against that schema, defaults included, encodes
// the result as cty msgpack and sends the bytes: in SetConfig for the plugin,
// in TaskConfig.MsgpackDriverConfig for each task. hclspec.Decode decodes
// those bytes into a Go struct whose fields carry `codec:"name"` tags;
// attributes the struct does not know, fractional numbers for integer fields
// and bad durations are errors that name the attribute, and time.Duration
// fields take Go duration strings such as "90s". hclspec.EncodeHCL is the
// client's side, for tests.
//
// # Errors: recoverable or not
//
// Whether the client may retry a failed StartTask (or TaskStats) is told by
// a status detail: RecoverableError wraps an error as gRPC FailedPrecondition
// with a RecoverableError detail saying recoverable or not, and IsRecoverable
// reads it back. Other gRPC errors carry no such verdict; error identity
// (errors.Is) does not cross the process boundary.
//
// # Testing: plugintest
//
// Package plugintest launches a plugin binary as a Nomad client does — the
// handshake with Nomad's cookie, gRPC only, PluginInfo, then the device or
// driver stub its type calls for — and configures it from an HCL body
// evaluated against the plugin's own schema. plugintest.Build compiles the
// plugin's main package once per test binary. The package's example
// (Example_plugintest) serves the device plugin of ExampleServeDevice from its
// own test binary and drives it over plugintest; ExampleServeDriver is a small
// but complete driver.
//
// For a host rather than a plugin, ClientPluginSet is the go-plugin plugin
// set to dispense the gRPC clients with.
package nomadplugin
