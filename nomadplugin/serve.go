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
// which the Nomad client parses and re-logs under the plugin's name.
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
// blocks until the client goes away. Call it from main.
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
// blocks until the client goes away. Call it from main.
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
// plugin process: base, device and driver gRPC clients. The plugintest
// harness uses it exactly as a Nomad client uses its own.
func ClientPluginSet() plugin.PluginSet {
	return plugin.PluginSet{
		PluginKeyBase:   &BasePlugin{},
		PluginKeyDevice: &DevicePlugin{},
		PluginKeyDriver: &DriverPlugin{},
	}
}

var errNoImpl = errors.New("nomadplugin: no server implementation")

// BasePlugin registers the BasePlugin service; on the client side it
// dispenses a basepb.BasePluginClient.
type BasePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl basepb.BasePluginServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *BasePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	basepb.RegisterBasePluginServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *BasePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return basepb.NewBasePluginClient(c), nil
}

// DevicePlugin registers the DevicePlugin service; on the client side it
// dispenses a devicepb.DevicePluginClient.
type DevicePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl devicepb.DevicePluginServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *DevicePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	devicepb.RegisterDevicePluginServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *DevicePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return devicepb.NewDevicePluginClient(c), nil
}

// DriverPlugin registers the Driver service; on the client side it
// dispenses a driverpb.DriverClient.
type DriverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl driverpb.DriverServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *DriverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errNoImpl
	}
	driverpb.RegisterDriverServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *DriverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return driverpb.NewDriverClient(c), nil
}
