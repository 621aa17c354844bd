// Package config is the gateway's configuration: the configuration file's
// format (Parse: every setting an attribute) and the resolved settings the
// gateway's Server serves with (Settings, with Check). Errors name a
// setting by its attribute; the command (cmd/llmgw/internal/cli/gatewaycmd)
// defines a flag for each, applies a parsed file to the flags the command
// line left alone, and names a setting by its flag or the file's line.
package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/llmgw/llmgw/internal/hcldecode"
)

// FileHCL is the gateway's configuration file: every setting as an
// attribute (breaker_max_open), whose value means what the command's flag
// of the same name with "-" for "_" means: durations are strings such as
// "30s". To add a setting, add a field here and its flag to the command;
// the command's TestConfigCoversFlags holds the two together.
type FileHCL struct {
	Listen                  string   `hcl:"listen,optional"`
	Consul                  string   `hcl:"consul,optional"`
	Nomad                   string   `hcl:"nomad,optional"`
	Namespace               string   `hcl:"namespace,optional"`
	Advertise               string   `hcl:"advertise,optional"`
	Register                bool     `hcl:"register,optional"`
	RegisterTags            []string `hcl:"register_tags,optional"`
	RegisterCheckInterval   duration `hcl:"register_check_interval,optional"`
	ConsulWait              duration `hcl:"consul_wait,optional"`
	MaxBodyChatCompletions  int64    `hcl:"max_body_chat_completions,optional"`
	MaxBodyCompletions      int64    `hcl:"max_body_completions,optional"`
	MaxBodyEmbeddings       int64    `hcl:"max_body_embeddings,optional"`
	MaxJSONDepth            int      `hcl:"max_json_depth,optional"`
	BodyReadTimeout         duration `hcl:"body_read_timeout,optional"`
	CORSOrigins             []string `hcl:"cors_origins,optional"`
	BodyMemory              int64    `hcl:"body_memory,optional"`
	Attempts                int      `hcl:"attempts,optional"`
	NoReplicaRetryAfter     duration `hcl:"no_replica_retry_after,optional"`
	BreakerFailures         int      `hcl:"breaker_failures,optional"`
	BreakerOpen             duration `hcl:"breaker_open,optional"`
	BreakerMaxOpen          duration `hcl:"breaker_max_open,optional"`
	DialTimeout             duration `hcl:"dial_timeout,optional"`
	ResponseHeaderTimeout   duration `hcl:"response_header_timeout,optional"`
	CheckInterval           duration `hcl:"check_interval,optional"`
	CheckTimeout            duration `hcl:"check_timeout,optional"`
	CheckParallelism        int      `hcl:"check_parallelism,optional"`
	EngineMetricsInterval   duration `hcl:"engine_metrics_interval,optional"`
	HoldTimeout             duration `hcl:"hold_timeout,optional"`
	HoldPerModel            int      `hcl:"hold_per_model,optional"`
	HoldTotal               int      `hcl:"hold_total,optional"`
	WakeBurst               int      `hcl:"wake_burst,optional"`
	DemandWindow            duration `hcl:"demand_window,optional"`
	ModelsVariable          string   `hcl:"models_variable,optional"`
	ModelsNamespace         string   `hcl:"models_namespace,optional"`
	ModelsNomad             string   `hcl:"models_nomad,optional"`
	LogLevel                string   `hcl:"log_level,optional"`
	KeysFile                string   `hcl:"keys_file,optional"`
	KeysVariable            string   `hcl:"keys_variable,optional"`
	KeysNamespace           string   `hcl:"keys_namespace,optional"`
	ShareLimits             bool     `hcl:"share_limits,optional"`
	TLSCertFile             string   `hcl:"tls_cert_file,optional"`
	TLSKeyFile              string   `hcl:"tls_key_file,optional"`
	Routing                 []string `hcl:"routing,optional"`
	PrefixLoadFactor        float64  `hcl:"prefix_load_factor,optional"`
	PrefixHistoryLoadFactor float64  `hcl:"prefix_history_load_factor,optional"`
	PrefixOpeningLimit      int      `hcl:"prefix_opening_limit,optional"`
	PrefixOpeningWait       duration `hcl:"prefix_opening_wait,optional"`
	Body                    hcl.Body `hcl:",body"`
}

// duration is a duration attribute: a string such as "30s", "10m".
type duration string

// Setting is one setting the file gives: its attribute, its value as
// the command's flag would take it, and where.
type Setting struct {
	Attr  string
	Value string   // for a scalar setting
	List  []string // for a list setting (register_tags)
	At    string   // "file:line"
}

// File is a parsed configuration file: its settings in the order
// of the schema.
type File struct {
	Filename string
	Settings []Setting
}

// Parse parses a configuration file's contents. env looks up the
// variables env("NAME") reads (os.Getenv in the command). Every problem is
// an error naming filename:line, joined with errors.Join.
func Parse(filename string, src []byte, env func(string) string) (*File, error) {
	ctx := &hcl.EvalContext{Functions: map[string]function.Function{"env": hcldecode.EnvFunc(env)}}
	var raw FileHCL
	f, ok := hcldecode.Decode(filename, src, ctx, &raw)
	var errs []error
	for _, p := range f.Problems() {
		errs = append(errs, &p)
	}
	if !ok {
		return nil, errors.Join(errs...)
	}
	cf := &File{Filename: filename}
	v := reflect.ValueOf(raw)
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("hcl"), ",")
		r, given := f.Given(raw.Body, name)
		if name == "" || !given {
			continue
		}
		s := Setting{Attr: name, At: fmt.Sprintf("%s:%d", filename, max(r.Start.Line, 1))}
		switch fv := v.Field(i).Interface().(type) {
		case string:
			s.Value = fv
		case duration:
			s.Value = string(fv)
			if _, err := hcldecode.ParseDuration(name, s.Value); err != nil {
				errs = append(errs, &hcldecode.Problem{Filename: filename, Line: max(r.Start.Line, 1), Msg: err.Error()})
			}
		case bool:
			s.Value = strconv.FormatBool(fv)
		case int:
			s.Value = strconv.Itoa(fv)
		case int64:
			s.Value = strconv.FormatInt(fv, 10)
		case float64:
			s.Value = strconv.FormatFloat(fv, 'g', -1, 64)
		case []string:
			s.List = fv
		default:
			panic(fmt.Sprintf("gateway/config: attribute %s of type %T", name, fv))
		}
		cf.Settings = append(cf.Settings, s)
	}
	for _, s := range cf.Settings {
		if (s.Attr == "consul" || s.Attr == "nomad") && s.Value == "" {
			errs = append(errs, fmt.Errorf("%s: %s: empty address", s.At, s.Attr))
		}
	}
	if c, n := cf.Lookup("consul"), cf.Lookup("nomad"); c != nil && n != nil {
		errs = append(errs, fmt.Errorf("%s: consul and nomad (%s): discover from one of them", c.At, n.At))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cf, nil
}

// Lookup returns the setting of attribute attr, nil when the file does
// not give it.
func (cf *File) Lookup(attr string) *Setting {
	for i := range cf.Settings {
		if cf.Settings[i].Attr == attr {
			return &cf.Settings[i]
		}
	}
	return nil
}
