package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/weightsapi"
)

// Names in rendered jobs.
const (
	DriverName = "llmgw"  // task driver
	TaskName   = "engine" // the engine's task, in every group
	// FetchTaskName is the prestart task of a group whose model's weights
	// the node's store fetches (the driver's engine "fetch"): the engine
	// task starts once the weights are whole on the node.
	FetchTaskName = "weights"
	// HubTokenEnv is the variable a gated repository's token reaches the
	// fetch in (a profile's env_from_variable of that name).
	HubTokenEnv = "HF_TOKEN"
	PortHTTP    = "http" // the engine's API port, every shard
	PortDist    = "dist" // the leader's rendezvous port, shard 0 of a multi-node replica
	// LeaderEnvFile is where the other shards' template writes the leader's
	// address (inside the task directory).
	LeaderEnvFile = "local/leader.env"
	// VariableEnvFile is where a profile's env_from_variable template
	// writes the values it reads: the task's secrets directory, which
	// only the task can read.
	VariableEnvFile = "secrets/llmgw-variables.env"
)

// Environment variables rendered into every task (Nomad's task env block,
// so that the engine and a `command` engine's wrapper see them).
const (
	EnvReplica    = "LLMGW_REPLICA"           // replica id
	EnvServedName = "LLMGW_SERVED_MODEL_NAME" // the catalog's model name
	EnvNNodes     = "LLMGW_NNODES"            // shards of the replica
	EnvNodeRank   = "LLMGW_NODE_RANK"         // this shard's index; 0 is the leader
	EnvLeaderHost = "LLMGW_LEADER_HOST"       // multi-node: the leader's dist address…
	EnvLeaderPort = "LLMGW_LEADER_PORT"       // …its port…
	EnvLeaderAddr = "LLMGW_LEADER_ADDR"       // …and both, host:port
	EnvNCCLIBHCA  = "NCCL_IB_HCA"             // multi-node on a fabric: node meta llmgw.hcas
)

// LeaderUnknownHost is the leader host a non-leader shard sees until the
// leader's dist service is registered: a name under .invalid, which never
// resolves, so that an engine started too early fails at once naming it,
// and the template restarts it once the leader is known.
const LeaderUnknownHost = "llmgw-leader-not-registered.invalid"

// Defaults of Settings: what a zero field means.
const (
	DefaultReadyInterval = time.Second
	DefaultReadyTimeout  = 30 * time.Minute
	DefaultKillTimeout   = 60 * time.Second
	DefaultShutdownDelay = 15 * time.Second
	DefaultCheckInterval = 10 * time.Second
	DefaultCheckTimeout  = 5 * time.Second
	// DefaultCPUMHz is the CPU share of a profile that asks for no cores.
	DefaultCPUMHz = 1000
	// DefaultMemoryMB is the memory of a profile that asks for none.
	DefaultMemoryMB = 4096
)

// Service providers.
const (
	ProviderNomad  = "nomad"
	ProviderConsul = "consul"
)

// Sentinel errors, for errors.Is.
var (
	// ErrInvalidInput: the input cannot be rendered (a decision that placed
	// nothing, that disagrees with its model or profile, nodes without the
	// information a multi-node replica needs, bad settings).
	ErrInvalidInput = errors.New("invalid render input")
	// ErrUnsupported: the profile asks for something its engine cannot do
	// through the driver (an unknown engine; several nodes for TGI or
	// llama.cpp).
	ErrUnsupported = errors.New("unsupported by engine")
)

// NodeInfo is what rendering needs to know about a node the decision
// chose, beyond its name.
type NodeInfo struct {
	// Fabric is the node's meta llmgw.fabric: the RDMA fabric its HCAs are
	// on. A multi-node replica's shards must all report the same one.
	Fabric string
}

// Settings are the controller-wide parts of every rendered job (the
// controller's config file, llmgw.hcl). Zero fields take the defaults.
type Settings struct {
	// Namespace and Region of the jobs; "" leaves them to Nomad.
	Namespace, Region string
	// Datacenters the jobs may run in; empty is every one ("*").
	Datacenters []string
	// Priority of the jobs; 0 leaves Nomad's default (50).
	Priority int
	// ServiceProvider registers the replicas' services: "nomad" (default)
	// or "consul".
	ServiceProvider string
	// ReadyInterval and ReadyTimeout are the driver's readiness probe
	// (task config ready.interval, ready.timeout): how long an engine may
	// load before the driver gives up on it.
	ReadyInterval, ReadyTimeout time.Duration
	// CheckInterval and CheckTimeout are the service's HTTP check.
	CheckInterval, CheckTimeout time.Duration
	// KillTimeout is how long an engine has between SIGTERM and SIGKILL.
	KillTimeout time.Duration
	// ShutdownDelay is how long a stopping shard stays up after its service
	// is deregistered, for the gateway to stop sending it requests.
	ShutdownDelay time.Duration
	// Env is set for every engine (task config env); a profile's env wins.
	Env map[string]string
	// Commands maps an engine to the executable tasks run for it (task
	// config command); an engine not listed runs what the driver's plugin
	// config names.
	Commands map[string]string
	// LostAfter, when not 0, is every group's disconnect.lost_after: Nomad
	// keeps a disconnected node's allocations "unknown" that long before it
	// marks them lost, without placing replacements (replace = false; the
	// controller places the replica elsewhere once it counts as failed), and
	// keeps the originals if the node comes back in time. 0 renders no
	// disconnect block: Nomad marks them lost as soon as the node is down.
	LostAfter time.Duration
}

// DefaultSettings returns the settings a zero Settings stands for.
func DefaultSettings() Settings { return Settings{}.withDefaults() }

func (s Settings) withDefaults() Settings {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&s.ReadyInterval, DefaultReadyInterval)
	def(&s.ReadyTimeout, DefaultReadyTimeout)
	def(&s.CheckInterval, DefaultCheckInterval)
	def(&s.CheckTimeout, DefaultCheckTimeout)
	def(&s.KillTimeout, DefaultKillTimeout)
	def(&s.ShutdownDelay, DefaultShutdownDelay)
	if s.ServiceProvider == "" {
		s.ServiceProvider = ProviderNomad
	}
	if len(s.Datacenters) == 0 {
		s.Datacenters = []string{"*"}
	}
	return s
}

func (s Settings) check() error {
	var errs []error
	if s.ServiceProvider != ProviderNomad && s.ServiceProvider != ProviderConsul {
		errs = append(errs, fmt.Errorf("service provider %q: want %q or %q", s.ServiceProvider, ProviderNomad, ProviderConsul))
	}
	if s.ReadyInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("ready interval %s: below the driver's minimum of 100ms", s.ReadyInterval))
	}
	if s.ReadyTimeout < 0 || s.KillTimeout < 0 || s.ShutdownDelay < 0 {
		errs = append(errs, errors.New("negative ready timeout, kill timeout or shutdown delay"))
	}
	if s.CheckInterval < time.Second || s.CheckTimeout < time.Second {
		errs = append(errs, fmt.Errorf("check interval %s and timeout %s: Nomad's minimum is 1s", s.CheckInterval, s.CheckTimeout))
	}
	if s.Priority < 0 {
		errs = append(errs, fmt.Errorf("priority %d: negative", s.Priority))
	}
	if s.LostAfter < 0 {
		errs = append(errs, fmt.Errorf("lost_after %s: negative", s.LostAfter))
	}
	return errors.Join(errs...)
}

// Input is one placed replica and what rendering its job needs.
type Input struct {
	// Model and Profile are the catalog entries the replica runs; the
	// profile fingerprint (job meta llmgw.profile_fp, part of the job ID)
	// is computed from them.
	Model   facility.Model
	Profile facility.Profile
	// Gen is the generation of the replica's job (job meta llmgw.gen, part
	// of the job ID): the reconciler bumps it to place a second job of an
	// unchanged profile beside the first (moving out of a drained domain,
	// new copy first), and keeps it when it re-places a job in place.
	Gen int
	// Decision is the facility's placement: the replica id, the domain it
	// was pinned to and one shard per node, in rank order.
	Decision facility.Decision
	// Nodes holds what is known about the decision's nodes, by node name.
	// Only multi-node replicas need it (every shard's node must be in it).
	Nodes    map[string]NodeInfo
	Settings Settings
}

// Job renders one replica as a Nomad service job: one task group per shard,
// each pinned to its node. See the package documentation for what is in it
// and why.
func Job(in Input) (*api.Job, error) {
	s := in.Settings.withDefaults()
	r, err := plan(in, s)
	if err != nil {
		return nil, fmt.Errorf("render replica %q: %w", in.Decision.Replica, err)
	}
	m, p, d := in.Model, in.Profile, in.Decision
	fp := facility.ProfileFingerprint(m, p)
	id := JobID(d.Replica, fp, in.Gen)
	nodes := make([]string, len(d.Shards))
	watts := make([]string, len(d.Shards))
	for i, sh := range d.Shards {
		nodes[i] = sh.Node
		watts[i] = strconv.FormatFloat(sh.Watts, 'f', -1, 64)
	}
	job := &api.Job{
		ID:          new(id),
		Name:        new(id),
		Type:        new(api.JobTypeService),
		Datacenters: slices.Clone(s.Datacenters),
		NodePool:    new(pool(p.Pool)),
		Meta: map[string]string{
			MetaManaged:   "true",
			MetaModel:     m.Name,
			MetaProfile:   p.Name,
			MetaReplica:   d.Replica,
			MetaProfileFP: fp,
			MetaGen:       strconv.Itoa(in.Gen),
			MetaDomain:    FormatScope(d.Domain),
			MetaShards:    strconv.Itoa(len(d.Shards)),
			MetaNodes:     strings.Join(nodes, ","),
			MetaRender:    strconv.Itoa(RenderVersion),
			MetaWatts:     strings.Join(watts, ","),
			MetaGPU:       p.GPU,
			MetaGPUs:      strconv.Itoa(p.GPUs),
		},
		Constraints: r.constraints(d),
		Update: &api.UpdateStrategy{
			MaxParallel:      new(1),
			HealthCheck:      new("checks"),
			MinHealthyTime:   new(30 * time.Second),
			HealthyDeadline:  new(s.ReadyTimeout + 5*time.Minute),
			ProgressDeadline: new(s.ReadyTimeout + 15*time.Minute),
			AutoRevert:       new(false),
			Canary:           new(0),
		},
	}
	if r.adapters.Runtime {
		job.Meta[MetaAdapters] = AdaptersRuntime
	}
	if s.Namespace != "" {
		job.Namespace = new(s.Namespace)
	}
	if s.Region != "" {
		job.Region = new(s.Region)
	}
	if s.Priority > 0 {
		job.Priority = new(s.Priority)
	}
	for i, sh := range d.Shards {
		job.TaskGroups = append(job.TaskGroups, r.group(i, sh.Node))
	}
	return job, nil
}

// rendering is what Job works from once the input is checked.
type rendering struct {
	in        Input
	s         Settings
	engine    *engine.Descriptor
	layout    engine.Layout // the profile's, resolved
	nnodes    int
	fabric    string // the shards' common fabric; "" none or single-node
	readyPath string
	// adapters is how the replica gets the model's LoRA adapters.
	adapters engine.AdapterPlan
}

func plan(in Input, s Settings) (*rendering, error) {
	m, p, d := in.Model, in.Profile, in.Decision
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%w: settings: %w", ErrInvalidInput, err)
	}
	switch {
	case in.Gen < 0:
		return nil, bad("generation %d: negative", in.Gen)
	case !d.Placed || len(d.Shards) == 0:
		return nil, bad("decision placed nothing")
	case d.Replica == "" || strings.ContainsAny(d.Replica, " ,\x00"):
		return nil, bad("replica id %q: empty or with a space, comma or NUL", d.Replica)
	case d.Model != m.Name:
		return nil, bad("decision is for model %q, not %q", d.Model, m.Name)
	case d.Profile != p.Name:
		return nil, bad("decision is for profile %q, not %q", d.Profile, p.Name)
	case m.Source == "":
		return nil, bad("model %q has no source", m.Name)
	case p.GPU == "" || p.GPUs < 1:
		return nil, bad("profile %q: needs a GPU model and at least one GPU", p.Name)
	case p.CPUCores < 0 || p.MemoryGB < 0:
		return nil, bad("profile %q: negative cpu_cores or memory_gb", p.Name)
	}
	want := max(p.Nodes, 1)
	if len(d.Shards) != want {
		return nil, bad("decision has %d shards, profile %q has nodes = %d", len(d.Shards), p.Name, want)
	}
	seen := map[string]bool{}
	for i, sh := range d.Shards {
		if sh.Node == "" || strings.ContainsAny(sh.Node, ",\x00") {
			return nil, bad("shard %d: node name %q empty or with a comma", i, sh.Node)
		}
		if seen[sh.Node] {
			return nil, bad("shard %d: node %q holds another shard", i, sh.Node)
		}
		seen[sh.Node] = true
	}
	for _, dom := range d.Domain {
		if strings.ContainsAny(dom.Value, ",=") {
			return nil, bad("domain %s: value with a comma or '='", dom)
		}
	}
	desc, ok := engine.Lookup(p.Engine)
	if !ok {
		return nil, fmt.Errorf("%w: engine %q (want one of %s)", ErrUnsupported, p.Engine, strings.Join(engine.Engines(), ", "))
	}
	r := &rendering{in: in, s: s, engine: desc, nnodes: want, readyPath: p.Ready}
	if r.readyPath == "" {
		r.readyPath = desc.ReadyPath
	}
	if r.nnodes > 1 && desc.MultiNode == nil {
		return nil, fmt.Errorf("%w: engine %q runs on one node, profile %q asks for nodes = %d", ErrUnsupported, p.Engine, p.Name, r.nnodes)
	}
	// The catalog's Validate checked the same; a profile that did not come
	// through it is checked here, naming the field.
	var err error
	if r.layout, err = p.ResolvedLayout(); err != nil {
		return nil, bad("profile %q: %v", p.Name, err)
	}
	if err := desc.CheckArgs(p.Args, desc.ServedNameFlag != ""); err != nil {
		return nil, bad("profile %q: %v", p.Name, err)
	}
	// The model's LoRA adapters: as the engine loads them at start, the
	// task's adapter blocks, which the driver checks and renders onto the
	// command line (engine.AdapterArgs); or, where the controller loads
	// them into the running engine (engine.PlanAdapters), the engine's
	// slots and the environment that turns its API on, and no adapter.
	if r.adapters, err = m.AdapterPlan(p); err != nil {
		return nil, bad("model %q, profile %q: %v", m.Name, p.Name, err)
	}
	if len(m.Adapters) > 0 {
		if err := engine.CheckAdapterArgs(p.Engine, p.Args); err != nil {
			return nil, bad("profile %q: %v", p.Name, err)
		}
	}
	if desc.Model.File && m.File == "" && !path.IsAbs(m.Source) {
		return nil, bad("model %q: engine %q loads one local file: give the model a file, or a source that is the file's absolute path", m.Name, p.Engine)
	}
	if r.nnodes > 1 {
		for i, sh := range d.Shards {
			n, ok := in.Nodes[sh.Node]
			if !ok {
				return nil, bad("shard %d: no node info for %q", i, sh.Node)
			}
			if i == 0 {
				r.fabric = n.Fabric
			} else if n.Fabric != r.fabric {
				return nil, bad("shards on fabrics %q and %q: a multi-node replica stays on one", r.fabric, n.Fabric)
			}
		}
		if !strings.HasPrefix(r.fabric, p.Fabric) {
			return nil, bad("nodes on fabric %q, profile %q wants %q", r.fabric, p.Name, p.Fabric)
		}
	}
	return r, nil
}

// constraints are the job-level constraints: the decided domain at every
// level, and for a multi-node replica distinct hosts on one fabric.
func (r *rendering) constraints(d facility.Decision) []*api.Constraint {
	var cs []*api.Constraint
	for _, dom := range d.Domain {
		cs = append(cs, &api.Constraint{LTarget: metaTarget(dom.Level.String()), Operand: "=", RTarget: dom.Value})
	}
	if r.nnodes > 1 {
		cs = append(cs, &api.Constraint{Operand: api.ConstraintDistinctHosts, RTarget: "true"})
		if r.fabric != "" {
			cs = append(cs,
				&api.Constraint{LTarget: metaTarget("fabric"), Operand: "=", RTarget: r.fabric},
				&api.Constraint{LTarget: metaTarget("hcas"), Operand: api.ConstraintAttributeIsSet})
		}
	}
	return cs
}

func metaTarget(key string) string { return "${meta.llmgw." + key + "}" }

func (r *rendering) group(rank int, node string) *api.TaskGroup {
	s := r.s
	multi := r.nnodes > 1
	ports := []api.Port{{Label: PortHTTP}}
	if multi && rank == 0 {
		ports = append(ports, api.Port{Label: PortDist})
	}
	tg := &api.TaskGroup{
		Name:        new(GroupName(rank)),
		Count:       new(1),
		Constraints: []*api.Constraint{{LTarget: "${node.unique.name}", Operand: "=", RTarget: node}},
		Meta:        map[string]string{GroupMetaShard: strconv.Itoa(rank), GroupMetaNode: node},
		Networks:    []*api.NetworkResource{{Mode: "host", DynamicPorts: ports}},
		RestartPolicy: &api.RestartPolicy{
			Attempts: new(2),
			Interval: new(max(30*time.Minute, 2*s.ReadyTimeout)),
			Delay:    new(30 * time.Second),
			Mode:     new(api.RestartPolicyModeFail),
		},
		ReschedulePolicy: &api.ReschedulePolicy{
			Attempts:      new(0),
			Interval:      new(time.Duration(0)),
			Unlimited:     new(true),
			Delay:         new(time.Minute),
			DelayFunction: new("exponential"),
			MaxDelay:      new(30 * time.Minute),
		},
		ShutdownDelay: new(s.ShutdownDelay),
		Tasks:         r.tasks(rank),
	}
	if s.LostAfter > 0 {
		tg.Disconnect = &api.DisconnectStrategy{
			LostAfter: new(s.LostAfter),
			Replace:   new(false),
			Reconcile: new(api.ReconcileOptionKeepOriginal),
		}
	}
	if rank == 0 {
		tg.Services = r.services()
	} else {
		// The template that brings the leader's address re-renders on
		// every restart, so a restarted shard never keeps a stale one.
		tg.RestartPolicy.RenderTemplates = new(true)
	}
	return tg
}

// services are shard 0's: the replica's API service, and for a multi-node
// replica the leader's rendezvous service.
func (r *rendering) services() []*api.Service {
	m, p, d, s := r.in.Model, r.in.Profile, r.in.Decision, r.s
	grace := s.ReadyTimeout + time.Minute
	out := []*api.Service{{
		Name: ServiceName(m.Name),
		// weight= is the gateway's traffic share for the replica. It is not
		// part of the profile's fingerprint (changing it restarts nothing),
		// so a changed weight reaches a replica's service when its job is
		// next rendered (a roll, a move, a re-placement).
		Tags: []string{gatewayapi.ServiceTag, gatewayapi.TagModel + m.Name, gatewayapi.TagProfile + p.Name,
			gatewayapi.TagReplica + d.Replica, gatewayapi.TagWeight + strconv.Itoa(max(p.Weight, 1)), gatewayapi.TagEngine + p.Engine},
		PortLabel: PortHTTP,
		Provider:  s.ServiceProvider,
		Checks: []api.ServiceCheck{{
			Name:      "ready",
			Type:      "http",
			Path:      r.readyPath,
			Interval:  s.CheckInterval,
			Timeout:   s.CheckTimeout,
			TaskName:  TaskName,
			OnUpdate:  api.OnUpdateRequireHealthy,
			PortLabel: PortHTTP,
			CheckRestart: &api.CheckRestart{
				Limit: 3,
				Grace: &grace,
			},
		}},
	}}
	if r.nnodes > 1 {
		out = append(out, &api.Service{
			Name:      DistServiceName(d.Replica),
			Tags:      []string{gatewayapi.DistTag, gatewayapi.TagReplica + d.Replica},
			PortLabel: PortDist,
			Provider:  s.ServiceProvider,
		})
	}
	return out
}

// tasks are a group's tasks: the engine's, and the prestart fetch of its
// weights where the node's store fetches them and does not hold them yet.
func (r *rendering) tasks(rank int) []*api.Task {
	out := []*api.Task{r.task(rank)}
	m := r.in.Model
	// Where the planner saw the weights whole on the shard's node, no
	// prestart task: the engine task's own look in the store finds them
	// (and fetches, should they have gone since), without a task's start
	// in front of the engine's.
	if sh := r.in.Decision.Shards; rank < len(sh) && sh[rank].Fetch != nil && sh[rank].Fetch.Present {
		return out
	}
	if wb := weightsBlock(m.Weights); wb != nil {
		cfg := map[string]any{"engine": "fetch", "model": m.Source, "weights": []map[string]any{wb}}
		if m.File != "" {
			cfg["model_file"] = m.File
		}
		fetch := &api.Task{
			Name:        FetchTaskName,
			Driver:      DriverName,
			Lifecycle:   &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart},
			Config:      cfg,
			Resources:   &api.Resources{CPU: new(100), MemoryMB: new(128)},
			KillTimeout: new(10 * time.Second),
		}
		fetch.Templates = hubTokenTemplate(r.in.Profile)
		out = append(out, fetch)
	}
	return out
}

func (r *rendering) task(rank int) *api.Task {
	m, p, d, s := r.in.Model, r.in.Profile, r.in.Decision, r.s
	cfg := map[string]any{
		"engine": p.Engine,
		"model":  m.Source,
		"args":   r.args(rank),
		"port":   PortHTTP,
		"ready": []map[string]any{{
			"path":     r.readyPath,
			"interval": formatDuration(s.ReadyInterval),
			"timeout":  formatDuration(s.ReadyTimeout),
		}},
		"tensor_parallel": r.layout.Tensor,
	}
	if l := r.layout; l.Pipeline > 1 {
		cfg["pipeline_parallel"] = l.Pipeline
	}
	if l := r.layout; l.Data > 1 {
		cfg["data_parallel"] = l.Data
	}
	if l := r.layout; l.Expert > 1 {
		cfg["expert_parallel"] = l.Expert
	}
	if m.File != "" {
		cfg["model_file"] = m.File
	}
	if wb := weightsBlock(m.Weights); wb != nil {
		cfg["weights"] = []map[string]any{wb}
	}
	if r.engine.ServedNameFlag != "" {
		cfg["served_model_name"] = m.Name
	}
	if len(m.Adapters) > 0 && !r.adapters.Runtime {
		cfg["adapter"] = adapterBlocks(m)
		if m.MaxAdapters > 0 {
			cfg["max_adapters"] = m.MaxAdapters
		}
	}
	if r.nnodes > 1 {
		cfg["nodes"] = r.nnodes
		cfg["node_rank"] = rank
		if r.engine.MultiNode.Args != nil {
			cfg["leader_addr"] = "${" + EnvLeaderAddr + "}"
		}
	}
	if rank > 0 && r.engine.MultiNode.Headless {
		// Ranks above 0 of a multi-node replica serve no HTTP (vLLM's
		// --headless workers, SGLang's non-zero ranks): the driver counts
		// them ready once they run. Shard 0 serves, and its readiness (and
		// the service's check) stands for the replica.
		cfg["ready"].([]map[string]any)[0]["skip"] = true
	}
	if c := s.Commands[p.Engine]; c != "" {
		cfg["command"] = c
	}
	env := maps.Clone(s.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, p.Env)
	// llmgw's to set: the controller's loads need the engine's API on.
	maps.Copy(env, r.adapters.Env)
	for _, v := range p.EnvFromVariable {
		// The task config's env wins over the task environment the
		// template feeds (the driver's layering): the Variable's value
		// wins over a setting of the same name.
		delete(env, v.Name)
	}
	if len(env) > 0 {
		cfg["env"] = env
	}

	taskEnv := map[string]string{
		EnvReplica:    d.Replica,
		EnvServedName: m.Name,
		EnvNNodes:     strconv.Itoa(r.nnodes),
		EnvNodeRank:   strconv.Itoa(rank),
	}
	var templates []*api.Template
	if r.nnodes > 1 {
		if rank == 0 {
			taskEnv[EnvLeaderHost] = "${NOMAD_IP_" + PortDist + "}"
			taskEnv[EnvLeaderPort] = "${NOMAD_PORT_" + PortDist + "}"
			taskEnv[EnvLeaderAddr] = "${NOMAD_ADDR_" + PortDist + "}"
		} else {
			// Until the template has found the leader (template env wins
			// over the task's env).
			taskEnv[EnvLeaderHost] = LeaderUnknownHost
			taskEnv[EnvLeaderPort] = "1"
			taskEnv[EnvLeaderAddr] = LeaderUnknownHost + ":1"
			templates = []*api.Template{{
				EmbeddedTmpl: new(leaderTemplate(s.ServiceProvider, DistServiceName(d.Replica))),
				DestPath:     new(LeaderEnvFile),
				ChangeMode:   new("restart"),
				Envvars:      new(true),
			}}
		}
		if r.fabric != "" {
			taskEnv[EnvNCCLIBHCA] = metaTarget("hcas")
		}
	}

	if len(p.EnvFromVariable) > 0 {
		templates = append(templates, &api.Template{
			EmbeddedTmpl: new(VariableEnvTemplate(p.EnvFromVariable)),
			DestPath:     new(VariableEnvFile),
			ChangeMode:   new("restart"),
			Envvars:      new(true),
		})
	}

	res := &api.Resources{
		MemoryMB: new(DefaultMemoryMB),
		Devices:  []*api.RequestedDevice{{Name: "nvidia/gpu/" + p.GPU, Count: new(uint64(p.GPUs))}},
	}
	if p.CPUCores > 0 {
		res.Cores = new(p.CPUCores)
	} else {
		res.CPU = new(DefaultCPUMHz)
	}
	if p.MemoryGB > 0 {
		res.MemoryMB = new(p.MemoryGB * 1024)
	}
	return &api.Task{
		Name:        TaskName,
		Driver:      DriverName,
		Config:      cfg,
		Env:         taskEnv,
		Resources:   res,
		KillTimeout: new(s.KillTimeout),
		Templates:   templates,
	}
}

// weightsBlock is the task config's weights block for a model whose
// weights the node's store fetches (the driver's docs/driver.md, "Weights:
// the node's model store"): the hub revision and files (the repository is
// the task's model, the catalog's source), or the URLs and their sha256.
// Nil for none, and for a path source, which the engine reads as it is.
func weightsBlock(w *weightsapi.Source) map[string]any {
	switch {
	case w == nil || w.Path != "":
		return nil
	case w.Hub != nil:
		b := map[string]any{"files": slices.Clone(w.Hub.Files)}
		if w.Hub.Revision != "" {
			b["revision"] = w.Hub.Revision
		}
		return b
	default:
		var urls []string
		sums := map[string]string{}
		for _, u := range w.URLs {
			urls = append(urls, u.URL)
			if name, err := u.FileName(); err == nil && u.SHA256 != "" {
				sums[name] = u.SHA256
			}
		}
		b := map[string]any{"urls": urls}
		if len(sums) > 0 {
			b["sha256"] = sums
		}
		return b
	}
}

// hubTokenTemplate is a fetch task's template for a gated repository's
// token, where the profile reads one from Nomad Variables
// (env_from_variable "HF_TOKEN"): that item alone, by the same template
// as the engine's; nil for none.
func hubTokenTemplate(p facility.Profile) []*api.Template {
	var token []facility.VariableEnv
	for _, v := range p.EnvFromVariable {
		if v.Name == HubTokenEnv {
			token = append(token, v)
		}
	}
	if len(token) == 0 {
		return nil
	}
	return []*api.Template{{
		EmbeddedTmpl: new(VariableEnvTemplate(token)),
		DestPath:     new(VariableEnvFile),
		ChangeMode:   new("restart"),
		Envvars:      new(true),
	}}
}

// args are the profile's arguments. The engine's own flags (the model,
// address, served name, layout and multi-node flags) are the driver's to
// render from the task config (engine.Build), once each: a profile's args
// may not set them (the catalog refuses them, naming args[i]).
func (r *rendering) args(int) []string {
	args := slices.Clone(r.in.Profile.Args)
	if args == nil {
		args = []string{}
	}
	// A model that sleeps when idle: the engine's own sleep after the
	// policy's idle_after without a request (unless the profile's args
	// set it themselves).
	if sm := r.engine.Sleep; sm != nil && r.in.Model.Autoscale.Sleeps() && !r.engine.Sets(args, sm.IdleFlag) {
		args = append(args, sm.IdleFlag, strconv.Itoa(max(int(r.in.Model.Autoscale.IdleAfter/time.Second), 1)))
	}
	// A model the gateways route by prefix: what the engine needs to keep
	// each conversation's state where its turns arrive (llama.cpp's slot
	// threshold), unless the profile's args set it.
	if pc := r.engine.PrefixCache; pc != nil && r.in.Model.Routing == gatewayapi.RoutingPrefix && !r.engine.Sets(args, pc.Flag) {
		args = append(args, pc.Flag, pc.Value)
	}
	// Adapters the controller loads at runtime: the engine's slots, on
	// every rank (the profile's args may not set them: CheckAdapterArgs).
	return append(args, r.adapters.Args...)
}

// adapterBlocks are the task config's adapter blocks: the model's LoRA
// adapters in the catalog's order, which the driver renders onto the
// engine's command line after checking them (a llama.cpp adapter that
// does not fit the model is left out, with a task event). An adapter the
// nodes' stores fetch travels as its source and weights block, as the
// model's weights do (the driver's store fetches it before the engine
// starts).
func adapterBlocks(m facility.Model) []map[string]any {
	var out []map[string]any
	for _, a := range m.Adapters {
		b := map[string]any{"name": a.Name}
		if wb := weightsBlock(&a.Weights); wb != nil {
			b["weights"] = []map[string]any{wb}
			if a.Weights.Hub != nil {
				b["source"] = a.Weights.Hub.Repo
			}
		} else {
			b["path"] = a.Weights.Path
		}
		if a.Rank > 0 {
			b["rank"] = a.Rank
		}
		out = append(out, b)
	}
	return out
}

// leaderTemplate renders the leader's dist address as environment
// variables, from the service catalog of the provider.
func leaderTemplate(provider, service string) string {
	fn := "nomadService"
	if provider == ProviderConsul {
		fn = "service"
	}
	return `{{- with ` + fn + ` "` + service + `" }}{{ with index . 0 }}
` + EnvLeaderHost + `={{ .Address }}
` + EnvLeaderPort + `={{ .Port }}
` + EnvLeaderAddr + `={{ .Address }}:{{ .Port }}
{{ end }}{{ end -}}
`
}

// VariableEnvTemplate is the template that reads a profile's
// env_from_variable items from their Nomad Variables when Nomad starts the
// task, with the task's workload identity: one nomadVar per Variable,
// each item's value JSON-quoted (the env file parser reads JSON strings),
// variables in name order. The controller never sees the values.
func VariableEnvTemplate(vars []facility.VariableEnv) string {
	byPath := map[string][]facility.VariableEnv{}
	var paths []string
	for _, v := range vars {
		if byPath[v.Variable] == nil {
			paths = append(paths, v.Variable)
		}
		byPath[v.Variable] = append(byPath[v.Variable], v)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, path := range paths {
		// The catalog checked path and key: letters, digits and a few
		// marks, nothing to escape.
		b.WriteString(`{{ with nomadVar "` + path + `" }}` + "\n")
		for _, v := range byPath[path] {
			b.WriteString(v.Name + `={{ index . "` + v.Key + `" | toJSON }}` + "\n")
		}
		b.WriteString("{{ end }}\n")
	}
	return b.String()
}

func pool(p string) string {
	if p == "" {
		return facility.DefaultPool
	}
	return p
}

// formatDuration writes d as Go's time.ParseDuration reads it, without
// zero units: "30m", "1h30m", "1s", "500ms".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Fetch job meta keys: a job that only fetches a model's weights onto one
// node (a warm spare), never a replica (no llmgw.managed).
const (
	MetaFetch      = "llmgw.fetch"       // "true" on every warm spare's fetch job
	MetaFetchModel = "llmgw.fetch_model" // the catalog model whose weights it fetches
	MetaFetchKey   = "llmgw.weights_key" // weightsapi key of those weights
	MetaFetchNode  = "llmgw.fetch_node"  // the node it fetches onto
	MetaFetchAt    = "llmgw.fetch_at"    // when the controller asked again, after an ended try
)

// FetchJobIDPrefix starts every warm spare's fetch job's ID.
const FetchJobIDPrefix = "llmgw-fetch-"

// FetchJobID is the ID of the job that fetches weights key onto node:
// the same inputs give the same ID, so a registration only if absent is a
// no-op for a controller that restarted or a second one.
func FetchJobID(key, node string) string {
	sum := sha256.Sum256([]byte(key + "\x00" + node))
	return FetchJobIDPrefix + dnsLabel(node) + "-" + hex.EncodeToString(sum[:])[:12]
}

// FetchJob renders the batch job that keeps model m's weights on node, a
// warm spare: one task, the driver's engine "fetch" (what a replica's
// prestart task runs), pinned to the node, with the profile's hub token
// template where it has one. It never restarts by itself: the controller
// decides again.
func FetchJob(m facility.Model, node string, s Settings) (*api.Job, error) {
	s = s.withDefaults()
	wb := weightsBlock(m.Weights)
	if wb == nil {
		return nil, fmt.Errorf("render fetch of %q: no weights a node fetches", m.Name)
	}
	key := m.Weights.Key()
	cfg := map[string]any{"engine": "fetch", "model": m.Source, "weights": []map[string]any{wb}}
	if m.File != "" {
		cfg["model_file"] = m.File
	}
	task := &api.Task{
		Name: FetchTaskName, Driver: DriverName, Config: cfg,
		Resources:   &api.Resources{CPU: new(100), MemoryMB: new(128)},
		KillTimeout: new(10 * time.Second),
	}
	if len(m.Profiles) > 0 {
		task.Templates = hubTokenTemplate(m.Profiles[0])
	}
	id := FetchJobID(key, node)
	job := &api.Job{
		ID: new(id), Name: new(id), Type: new(api.JobTypeBatch),
		Datacenters: slices.Clone(s.Datacenters),
		NodePool:    new(api.NodePoolAll), // pinned by name, whatever the node's pool
		Meta:        map[string]string{MetaFetch: "true", MetaFetchModel: m.Name, MetaFetchKey: key, MetaFetchNode: node},
		Constraints: []*api.Constraint{{LTarget: "${node.unique.name}", Operand: "=", RTarget: node}},
		TaskGroups: []*api.TaskGroup{{
			Name:             new("fetch"),
			RestartPolicy:    &api.RestartPolicy{Attempts: new(1), Delay: new(15 * time.Second), Mode: new(api.RestartPolicyModeFail)},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)},
			Tasks:            []*api.Task{task},
		}},
	}
	if s.Namespace != "" {
		job.Namespace = new(s.Namespace)
	}
	return job, nil
}
