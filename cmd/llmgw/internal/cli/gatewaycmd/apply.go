package gatewaycmd

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/gateway/config"
)

// apply sets every flag the command line left alone to the file's value,
// and returns where each setting applied came from (attribute to
// "file:line: attribute"). --consul or --nomad on the command line choose
// the source whatever the file says: the file's consul and nomad are
// then both left out.
func apply(cf *config.File, fl *pflag.FlagSet) (map[string]string, error) {
	from := map[string]string{}
	sourceFlag := fl.Changed("consul") || fl.Changed("nomad")
	for _, s := range cf.Settings {
		flag := flagName(s.Attr)
		if fl.Changed(flag) || (sourceFlag && (s.Attr == "consul" || s.Attr == "nomad")) {
			continue
		}
		f := fl.Lookup(flag)
		if f == nil {
			return nil, fmt.Errorf("%s: %s: no flag --%s", s.At, s.Attr, flag)
		}
		var err error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			err = sv.Replace(s.List)
		} else {
			err = f.Value.Set(s.Value)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", s.At, s.Attr, err)
		}
		from[s.Attr] = s.At + ": " + s.Attr
	}
	return from, nil
}
