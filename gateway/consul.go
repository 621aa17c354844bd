package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
)

// ConsulSource discovers replicas in Consul: the catalog's services tagged
// llmgw (a blocking query on /v1/catalog/services), and for each, its
// instances whose checks all pass (a blocking query on
// /v1/health/service/<name>?passing=1&tag=llmgw).
type ConsulSource struct {
	Client *consulapi.Client
	Logger *slog.Logger
	// Wait bounds each blocking query; 5 minutes by default.
	Wait time.Duration
}

// Run watches Consul until ctx ends, publishing every change.
func (s *ConsulSource) Run(ctx context.Context, publish func(Snapshot)) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("discovery", "consul")
	wait := s.Wait
	if wait <= 0 {
		wait = DefaultConsulWait
	}
	list := func(ctx context.Context, emit func(catalog)) {
		w := blockingquery.Watch[map[string][]string]{
			Wait:      wait,
			Backoff:   discoveryBackoff(),
			Unchanged: true,
			Fetch: consulFetch(func(q *consulapi.QueryOptions) (map[string][]string, *consulapi.QueryMeta, error) {
				return s.Client.Catalog().Services(q)
			}),
			OnAnswer: func(svcs map[string][]string, _ uint64) {
				cat := catalog{}
				for name, tags := range svcs {
					if slices.Contains(tags, gatewayapi.ServiceTag) {
						cat[name] = modelsFromTags(tags)
					}
				}
				emit(cat)
			},
			OnError: func(err error, _ time.Duration) { log.Warn("list services", "error", err) },
		}
		w.Run(ctx)
	}
	watch := func(ctx context.Context, name string, emit func([]Instance, bool)) {
		w := blockingquery.Watch[[]*consulapi.ServiceEntry]{
			Wait:      wait,
			Backoff:   discoveryBackoff(),
			Unchanged: true,
			Fetch: consulFetch(func(q *consulapi.QueryOptions) ([]*consulapi.ServiceEntry, *consulapi.QueryMeta, error) {
				return s.Client.Health().Service(name, gatewayapi.ServiceTag, true, q)
			}),
			OnAnswer: func(entries []*consulapi.ServiceEntry, _ uint64) {
				insts := make([]Instance, 0, len(entries))
				for _, e := range entries {
					if in, ok := consulInstance(e); ok {
						insts = append(insts, in)
					}
				}
				emit(insts, true)
			},
			OnError: func(err error, _ time.Duration) {
				log.Warn("health of service", "service", name, "error", err)
				emit(nil, false)
			},
		}
		w.Run(ctx)
	}
	return runDiscovery(ctx, log, list, watch, publish)
}

// consulFetch makes a blocking query's Fetch of a consul/api call: call
// gets query options with the query's WaitIndex, WaitTime and context.
func consulFetch[T any](call func(q *consulapi.QueryOptions) (T, *consulapi.QueryMeta, error)) blockingquery.Fetch[T] {
	return func(ctx context.Context, q blockingquery.Query) (T, uint64, error) {
		v, meta, err := call((&consulapi.QueryOptions{WaitIndex: q.Index, WaitTime: q.Wait}).WithContext(ctx))
		if err != nil {
			return v, 0, err
		}
		if meta == nil {
			return v, 0, errors.New("consul answered without query meta")
		}
		return v, meta.LastIndex, nil
	}
}

// consulInstance reads one health entry: the service's address, else the
// node's; the weight tag, else Consul's passing weight.
func consulInstance(e *consulapi.ServiceEntry) (Instance, bool) {
	if e == nil || e.Service == nil {
		return Instance{}, false
	}
	host := e.Service.Address
	node := ""
	if e.Node != nil {
		node = e.Node.Node
		if host == "" {
			host = e.Node.Address
		}
	}
	return instanceFromTags(node+"/"+e.Service.ID, host, e.Service.Port, e.Service.Tags, e.Service.Weights.Passing)
}

// ConsulRegistration is how the gateway registers itself in Consul's
// local agent.
type ConsulRegistration struct {
	// ID is the service ID; unique per gateway on the agent.
	ID string
	// Address and Port are what clients reach the gateway at; an empty
	// Address means the agent's node address.
	Address string
	Port    int
	// CheckURL is the HTTP check's URL, the gateway's /healthz as the
	// agent can reach it.
	CheckURL string
	// CheckInterval, default 10s; the check's timeout is a fifth of it,
	// at least a second. A gateway critical for a minute is deregistered.
	CheckInterval time.Duration
	Tags          []string
	// CheckTLSSkipVerify: the check does not verify the gateway's
	// certificate (CheckURL is https:// at an address it may not name).
	CheckTLSSkipVerify bool
}

// Register registers the gateway as gatewayapi.GatewayServiceName with an HTTP check,
// retrying with backoff until it succeeds or ctx ends, then waits for ctx
// and deregisters (with a fresh deadline, as ctx has ended) — also when ctx
// ended while a registration was on its way.
func (r ConsulRegistration) Register(ctx context.Context, c *consulapi.Client, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	interval := r.CheckInterval
	if interval <= 0 {
		interval = DefaultRegisterCheckInterval
	}
	reg := &consulapi.AgentServiceRegistration{
		ID:      r.ID,
		Name:    gatewayapi.GatewayServiceName,
		Tags:    append([]string{gatewayapi.GatewayServiceName}, r.Tags...),
		Address: r.Address,
		Port:    r.Port,
		Check: &consulapi.AgentServiceCheck{
			Name:                           "llmgw gateway health",
			HTTP:                           r.CheckURL,
			TLSSkipVerify:                  r.CheckTLSSkipVerify,
			Method:                         "GET",
			Interval:                       interval.String(),
			Timeout:                        max(interval/5, time.Second).String(),
			DeregisterCriticalServiceAfter: time.Minute.String(),
		},
	}
	bo := discoveryBackoff()
	registered := false
	for {
		err := c.Agent().ServiceRegisterOpts(reg, consulapi.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
		if err == nil {
			registered = true
			break
		}
		if ctx.Err() != nil {
			break
		}
		log.Warn("register in consul", "service", gatewayapi.GatewayServiceName, "id", r.ID, "error", err)
		if !bo.Wait(ctx) {
			break
		}
	}
	if registered {
		log.Info("registered in consul", "service", gatewayapi.GatewayServiceName, "id", r.ID, "check", r.CheckURL)
		<-ctx.Done()
	}
	// Deregister even when no attempt was seen to succeed: the agent may
	// have applied one whose answer the stop cut off.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.Agent().ServiceDeregisterOpts(r.ID, (&consulapi.QueryOptions{}).WithContext(dctx)); err != nil {
		if !registered {
			log.Debug("deregister after an unconfirmed registration", "id", r.ID, "error", err)
			return nil
		}
		return fmt.Errorf("deregister %s from consul: %w", r.ID, err)
	}
	log.Info("deregistered from consul", "id", r.ID)
	return nil
}
