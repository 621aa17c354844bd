package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
)

// PluginName is the name Nomad knows this device plugin by.
const PluginName = "nvml"

// Plugin is the nomad-device-nvml plugin: the BasePlugin and DevicePlugin
// gRPC services over a Manager.
type Plugin struct {
	basepb.UnimplementedBasePluginServer
	devicepb.UnimplementedDevicePluginServer

	ctx     context.Context // the plugin process's lifetime
	log     hclog.Logger
	version string
	newNVML func() nvmlseam.Lib

	mu     sync.Mutex
	mgr    *Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// NewPlugin returns a plugin whose background work lives as long as ctx.
// newNVML opens the real NVML library; mock mode does not call it.
func NewPlugin(ctx context.Context, log hclog.Logger, version string, newNVML func() nvmlseam.Lib) *Plugin {
	return &Plugin{ctx: ctx, log: log, version: version, newNVML: newNVML}
}

// PluginInfo implements BasePlugin.
func (p *Plugin) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DEVICE,
		PluginApiVersions: []string{nomadplugin.APIVersion},
		PluginVersion:     p.version,
		Name:              PluginName,
	}, nil
}

// ConfigSchema implements BasePlugin.
func (p *Plugin) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: ConfigSpec()}, nil
}

// SetConfig implements BasePlugin. The whole configuration is checked before
// anything starts; a bad one leaves the plugin as it was.
func (p *Plugin) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	cfg, err := DecodeConfig(req.GetMsgpackConfig())
	if err != nil {
		p.log.Error("rejecting configuration", "error", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var lib nvmlseam.Lib
	var mn *MockNVML
	mock := cfg.Mock != nil
	if mock {
		mn, err = NewMockNVML(*cfg.Mock)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "nomad-device-nvml config: "+err.Error())
		}
		lib = mn
		p.log.Info("serving mock GPUs", "system", cfg.Mock.System, "gpus", len(mn.GPUs()))
	} else {
		lib = p.newNVML()
	}
	mgr := NewManager(lib, cfg, p.log, mock)
	if cfg.PowerCaps != nil {
		if err := mgr.enableCaps(*cfg.PowerCaps); err != nil {
			return nil, status.Error(codes.InvalidArgument, "nomad-device-nvml config: "+err.Error())
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
		<-p.done
		// A new configuration is not a restart: event marks (fatal XIDs
		// above all) carry over.
		mgr.inherit(p.mgr)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if mn != nil && cfg.Mock.EventsFile != "" {
			feedDone := make(chan struct{})
			go func() {
				defer close(feedDone)
				mn.FeedEvents(ctx, cfg.Mock.EventsFile, p.log)
			}()
			defer func() { <-feedDone }()
		}
		if err := mgr.Run(ctx); err != nil {
			p.log.Error("device manager stopped", "error", err)
		}
	}()
	p.mgr, p.cancel, p.done = mgr, cancel, done
	p.log.Info("configured", "fingerprint_period", cfg.FingerprintPeriod.String(),
		"health_events", cfg.HealthEvents, "health_recovery", cfg.HealthRecovery.String(), "ignored_gpus", len(cfg.IgnoredGPUIDs))
	return &basepb.SetConfigResponse{}, nil
}

func (p *Plugin) manager() (*Manager, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mgr == nil {
		return nil, status.Error(codes.FailedPrecondition, "nomad-device-nvml: SetConfig has not been called")
	}
	return p.mgr, nil
}

// Fingerprint implements DevicePlugin: the current device groups at once,
// then a new message whenever health or attributes change. It never ends
// with an error while the plugin lives, because the Nomad client drops
// every device of a plugin whose fingerprint stream fails.
func (p *Plugin) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	mgr, err := p.manager()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	var last *devicepb.FingerprintResponse
	for {
		fp, changed, ready := mgr.Current()
		if ready && fp != last {
			if err := stream.Send(fp); err != nil {
				return err
			}
			last = fp
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Stats implements DevicePlugin: one sample at once, then one per
// collection interval (1s when the client gives none).
func (p *Plugin) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	mgr, err := p.manager()
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := stream.Send(&devicepb.StatsResponse{Groups: mgr.Stats()}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Reserve implements DevicePlugin.
func (p *Plugin) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	mgr, err := p.manager()
	if err != nil {
		return nil, err
	}
	res, err := mgr.Reserve(req.GetDeviceIds())
	if err != nil {
		if errors.Is(err, ErrUnknownDevice) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, fmt.Errorf("reserve: %w", err)
	}
	out := &devicepb.ContainerReservation{Envs: res.Envs}
	for _, d := range res.Devices {
		out.Devices = append(out.Devices, &devicepb.DeviceSpec{TaskPath: d, HostPath: d, Permissions: "rwm"})
	}
	return &devicepb.ReserveResponse{ContainerRes: out}, nil
}
