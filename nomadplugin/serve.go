package nomadplugin

import (
	"context"
	"errors"
	"os"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// NewLogger returns the hclog logger a plugin should use: JSON on stderr,
// which the Nomad client parses and re-logs under the plugin's name. The
// level is Info unless the environment variable LLMGW_LOG_LEVEL names another
// hclog level (trace, debug, info, warn, error).
func NewLogger(name string) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("LLMGW_LOG_LEVEL"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// ServeDevice serves a device plugin over go-plugin's gRPC transport and
// blocks until the client goes away. Call it from main. base and dev are
// usually one value that implements both services; logger receives
// go-plugin's own messages. A binary started by anything but a Nomad client
// (without Nomad's magic cookie in its environment) prints a notice and exits
// with status 1.
func ServeDevice(base basepb.BasePluginServer, dev devicepb.DevicePluginServer, logger hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins: plugin.PluginSet{
			PluginKeyBase:   &BasePlugin{Impl: base},
			PluginKeyDevice: &DevicePlugin{Impl: dev},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

// ServeDriver serves a driver plugin over go-plugin's gRPC transport and
// blocks until the client goes away. Call it from main. base and drv are
// usually one value that implements both services; otherwise it behaves as
// ServeDevice.
func ServeDriver(base basepb.BasePluginServer, drv driverpb.DriverServer, logger hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins: plugin.PluginSet{
			PluginKeyBase:   &BasePlugin{Impl: base},
			PluginKeyDriver: &DriverPlugin{Impl: drv},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

// ClientPluginSet is the plugin set a host uses to dispense stubs from a
// plugin process: under PluginKeyBase, PluginKeyDevice and PluginKeyDriver,
// a basepb.BasePluginClient, devicepb.DevicePluginClient and
// driverpb.DriverClient. The plugintest harness uses it as a Nomad client
// uses its own.
func ClientPluginSet() plugin.PluginSet {
	return plugin.PluginSet{
		PluginKeyBase:   &BasePlugin{},
		PluginKeyDevice: &DevicePlugin{},
		PluginKeyDriver: &DriverPlugin{},
	}
}

var errNoImpl = errors.New("nomadplugin: no server implementation")

// BasePlugin is the go-plugin plugin of the BasePlugin service: on the
// plugin side it registers Impl, on the host side it dispenses a
// basepb.BasePluginClient. ServeDevice, ServeDriver and ClientPluginSet build
// it; use it directly only to assemble a plugin.ServeConfig or
// plugin.ClientConfig of your own.
type BasePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl serves the service; nil on the host side.
	Impl basepb.BasePluginServer
}

// GRPCServer implements plugin.GRPCPlugin: it registers Impl on s, and fails
// when Impl is nil.
func (p *BasePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	basepb.RegisterBasePluginServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin: it returns a
// basepb.BasePluginClient over c.
func (p *BasePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return basepb.NewBasePluginClient(c), nil
}

// DevicePlugin is the go-plugin plugin of the DevicePlugin service: on the
// plugin side it registers Impl, on the host side it dispenses a
// devicepb.DevicePluginClient. See BasePlugin.
type DevicePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl serves the service; nil on the host side.
	Impl devicepb.DevicePluginServer
}

// GRPCServer implements plugin.GRPCPlugin: it registers Impl on s, and fails
// when Impl is nil.
func (p *DevicePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	devicepb.RegisterDevicePluginServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin: it returns a
// devicepb.DevicePluginClient over c.
func (p *DevicePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return devicepb.NewDevicePluginClient(c), nil
}

// DriverPlugin is the go-plugin plugin of the Driver service: on the plugin
// side it registers Impl, on the host side it dispenses a
// driverpb.DriverClient. See BasePlugin.
type DriverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl serves the service; nil on the host side.
	Impl driverpb.DriverServer
}

// GRPCServer implements plugin.GRPCPlugin: it registers Impl on s, and fails
// when Impl is nil.
func (p *DriverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	driverpb.RegisterDriverServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin: it returns a
// driverpb.DriverClient over c.
func (p *DriverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return driverpb.NewDriverClient(c), nil
}
