package gatewaycmd

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/pflag"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/llmgw/llmgw/internal/hcldecode"
)

// fileHCL is the gateway's configuration file (--config): every flag's
// setting, as an attribute named like the flag with "_" for "-"
// (--breaker-max-open is breaker_max_open). A value means what the flag
// means: durations are strings such as "30s". To add a setting, add its
// flag and a field here; TestConfigCoversFlags holds the two together.
type fileHCL struct {
	Listen                string   `hcl:"listen,optional"`
	Consul                string   `hcl:"consul,optional"`
	Nomad                 string   `hcl:"nomad,optional"`
	Namespace             string   `hcl:"namespace,optional"`
	Advertise             string   `hcl:"advertise,optional"`
	Register              bool     `hcl:"register,optional"`
	RegisterTags          []string `hcl:"register_tags,optional"`
	RegisterCheckInterval duration `hcl:"register_check_interval,optional"`
	ConsulWait            duration `hcl:"consul_wait,optional"`
	MaxModelScan          int64    `hcl:"max_model_scan,optional"`
	BodyMemory            int64    `hcl:"body_memory,optional"`
	Attempts              int      `hcl:"attempts,optional"`
	NoReplicaRetryAfter   duration `hcl:"no_replica_retry_after,optional"`
	BreakerFailures       int      `hcl:"breaker_failures,optional"`
	BreakerOpen           duration `hcl:"breaker_open,optional"`
	BreakerMaxOpen        duration `hcl:"breaker_max_open,optional"`
	DialTimeout           duration `hcl:"dial_timeout,optional"`
	ResponseHeaderTimeout duration `hcl:"response_header_timeout,optional"`
	CheckInterval         duration `hcl:"check_interval,optional"`
	CheckTimeout          duration `hcl:"check_timeout,optional"`
	CheckParallelism      int      `hcl:"check_parallelism,optional"`
	EngineMetricsInterval duration `hcl:"engine_metrics_interval,optional"`
	HoldTimeout           duration `hcl:"hold_timeout,optional"`
	HoldPerModel          int      `hcl:"hold_per_model,optional"`
	HoldTotal             int      `hcl:"hold_total,optional"`
	WakeBurst             int      `hcl:"wake_burst,optional"`
	DemandWindow          duration `hcl:"demand_window,optional"`
	ModelsVariable        string   `hcl:"models_variable,optional"`
	ModelsNamespace       string   `hcl:"models_namespace,optional"`
	ModelsNomad           string   `hcl:"models_nomad,optional"`
	LogLevel              string   `hcl:"log_level,optional"`
	KeysFile              string   `hcl:"keys_file,optional"`
	KeysVariable          string   `hcl:"keys_variable,optional"`
	KeysNamespace         string   `hcl:"keys_namespace,optional"`
	ShareLimits           bool     `hcl:"share_limits,optional"`
	TLSCertFile           string   `hcl:"tls_cert_file,optional"`
	TLSKeyFile            string   `hcl:"tls_key_file,optional"`
	Routing               []string `hcl:"routing,optional"`
	PrefixLoadFactor      float64  `hcl:"prefix_load_factor,optional"`
	Body                  hcl.Body `hcl:",body"`
}

// duration is a duration attribute: a string such as "30s", "10m".
type duration string

// fileSetting is one setting the file gives: its flag, its value as the
// flag would take it, and where.
type fileSetting struct {
	flag  string
	value string   // for a scalar flag
	list  []string // for a list flag (register_tags)
	attr  string
	at    string // "file:line"
}

// configFile is a parsed configuration file: its settings in the order
// of the schema.
type configFile struct {
	filename string
	settings []fileSetting
}

// parseConfig parses a configuration file's contents. env looks up the
// variables env("NAME") reads (os.Getenv in the command). Every problem is
// an error naming filename:line, joined with errors.Join.
func parseConfig(filename string, src []byte, env func(string) string) (*configFile, error) {
	ctx := &hcl.EvalContext{Functions: map[string]function.Function{"env": hcldecode.EnvFunc(env)}}
	var raw fileHCL
	f, ok := hcldecode.Decode(filename, src, ctx, &raw)
	var errs []error
	for _, p := range f.Problems() {
		errs = append(errs, &p)
	}
	if !ok {
		return nil, errors.Join(errs...)
	}
	cf := &configFile{filename: filename}
	v := reflect.ValueOf(raw)
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("hcl"), ",")
		r, given := f.Given(raw.Body, name)
		if name == "" || !given {
			continue
		}
		s := fileSetting{flag: strings.ReplaceAll(name, "_", "-"), attr: name, at: fmt.Sprintf("%s:%d", filename, max(r.Start.Line, 1))}
		switch fv := v.Field(i).Interface().(type) {
		case string:
			s.value = fv
		case duration:
			s.value = string(fv)
			if _, err := hcldecode.ParseDuration(name, s.value); err != nil {
				errs = append(errs, &hcldecode.Problem{Filename: filename, Line: max(r.Start.Line, 1), Msg: err.Error()})
			}
		case bool:
			s.value = strconv.FormatBool(fv)
		case int:
			s.value = strconv.Itoa(fv)
		case int64:
			s.value = strconv.FormatInt(fv, 10)
		case float64:
			s.value = strconv.FormatFloat(fv, 'g', -1, 64)
		case []string:
			s.list = fv
		default:
			panic(fmt.Sprintf("gatewaycmd: config attribute %s of type %T", name, fv))
		}
		cf.settings = append(cf.settings, s)
	}
	for _, s := range cf.settings {
		if (s.attr == "consul" || s.attr == "nomad") && s.value == "" {
			errs = append(errs, fmt.Errorf("%s: %s: empty address", s.at, s.attr))
		}
	}
	if c, n := cf.setting("consul"), cf.setting("nomad"); c != nil && n != nil {
		errs = append(errs, fmt.Errorf("%s: consul and nomad (%s): discover from one of them", c.at, n.at))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cf, nil
}

func (cf *configFile) setting(attr string) *fileSetting {
	for i := range cf.settings {
		if cf.settings[i].attr == attr {
			return &cf.settings[i]
		}
	}
	return nil
}

// apply sets every flag the command line left alone to the file's value,
// and returns where each setting applied came from (flag name to
// "file:line: attribute"). --consul or --nomad on the command line choose
// the source whatever the file says: the file's consul and nomad are
// then both left out.
func (cf *configFile) apply(fl *pflag.FlagSet) (map[string]string, error) {
	from := map[string]string{}
	sourceFlag := fl.Changed("consul") || fl.Changed("nomad")
	for _, s := range cf.settings {
		if fl.Changed(s.flag) || (sourceFlag && (s.flag == "consul" || s.flag == "nomad")) {
			continue
		}
		f := fl.Lookup(s.flag)
		if f == nil {
			return nil, fmt.Errorf("%s: %s: no flag --%s", s.at, s.attr, s.flag)
		}
		var err error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			err = sv.Replace(s.list)
		} else {
			err = f.Value.Set(s.value)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", s.at, s.attr, err)
		}
		from[s.flag] = s.at + ": " + s.attr
	}
	return from, nil
}
