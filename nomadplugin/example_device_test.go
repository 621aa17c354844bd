package nomadplugin_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

// widgetDevice is a minimal device plugin: it offers the devices its
// configuration lists, as example/widget/<model>, all healthy. A job asks
// for them with device "example/widget" { count = 1 } and finds the ones it
// got in WIDGET_VISIBLE_DEVICES.
type widgetDevice struct {
	basepb.UnimplementedBasePluginServer
	devicepb.UnimplementedDevicePluginServer

	mu  sync.Mutex
	cfg *widgetConfig // nil until SetConfig
}

// widgetConfig is the plugin's config {} block, decoded by hclspec.Decode.
type widgetConfig struct {
	Model string   `codec:"model"`
	IDs   []string `codec:"ids"`
}

// widgetSpec is the schema of widgetConfig, which the Nomad client
// evaluates the block against.
var widgetSpec = hclspec.Object(map[string]*hclspec.Spec{
	"model": hclspec.Default(hclspec.Attr("model", "string"), hclspec.Literal(`"w1"`)),
	"ids":   hclspec.RequiredAttr("ids", "list(string)"),
})

func (d *widgetDevice) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DEVICE,
		PluginApiVersions: []string{nomadplugin.APIVersion},
		PluginVersion:     "0.1.0",
		Name:              "widget",
	}, nil
}

func (d *widgetDevice) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: widgetSpec}, nil
}

func (d *widgetDevice) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	var cfg widgetConfig
	if err := hclspec.Decode(widgetSpec, req.GetMsgpackConfig(), &cfg); err != nil {
		return nil, status.Error(codes.InvalidArgument, "widget config: "+err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg = &cfg
	return &basepb.SetConfigResponse{}, nil
}

func (d *widgetDevice) config() (*widgetConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg == nil {
		return nil, status.Error(codes.FailedPrecondition, "widget: SetConfig has not been called")
	}
	return d.cfg, nil
}

// Fingerprint sends the device group at once and then keeps the stream
// open: the Nomad client drops a plugin's devices when the stream ends. A
// plugin whose devices change sends a new message each time.
func (d *widgetDevice) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	cfg, err := d.config()
	if err != nil {
		return err
	}
	group := &devicepb.DeviceGroup{Vendor: "example", DeviceType: "widget", DeviceName: cfg.Model}
	for _, id := range cfg.IDs {
		group.Devices = append(group.Devices, &devicepb.DetectedDevice{ID: id, Healthy: true})
	}
	if err := stream.Send(&devicepb.FingerprintResponse{DeviceGroup: []*devicepb.DeviceGroup{group}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Reserve tells a task which devices it got, through its environment.
func (d *widgetDevice) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	cfg, err := d.config()
	if err != nil {
		return nil, err
	}
	for _, id := range req.GetDeviceIds() {
		if !slices.Contains(cfg.IDs, id) {
			return nil, status.Errorf(codes.InvalidArgument, "widget: unknown device %q", id)
		}
	}
	ids := slices.Sorted(slices.Values(req.GetDeviceIds()))
	return &devicepb.ReserveResponse{ContainerRes: &devicepb.ContainerReservation{
		Envs: map[string]string{"WIDGET_VISIBLE_DEVICES": strings.Join(ids, ",")},
	}}, nil
}

// Stats reports every device's state at the interval the client asks for.
func (d *widgetDevice) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	cfg, err := d.config()
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
		stats := &devicepb.DeviceGroupStats{Vendor: "example", Type: "widget", Name: cfg.Model,
			InstanceStats: map[string]*devicepb.DeviceStats{}}
		for _, id := range cfg.IDs {
			stats.InstanceStats[id] = &devicepb.DeviceStats{
				Summary:   &structspb.StatValue{StringVal: wrapperspb.String("idle")},
				Timestamp: timestamppb.Now(),
			}
		}
		if err := stream.Send(&devicepb.StatsResponse{Groups: []*devicepb.DeviceGroupStats{stats}}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-tick.C:
		}
	}
}

// A device plugin's main: serve the plugin until the Nomad client is done
// with it. Put the binary in the client's plugin_dir and name it in a
// plugin "<binary>" { config { ids = ["w-0", "w-1"] } } block.
func ExampleServeDevice() {
	d := &widgetDevice{}
	nomadplugin.ServeDevice(d, d, nomadplugin.NewLogger("nomad-device-widget"))
}
