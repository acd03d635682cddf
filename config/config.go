// Package config fills a flag.FlagSet from its three other sources, in the
// order operators expect: a flag on the command line beats its TURBINE_*
// environment variable, which beats the key of the same name in the
// config file (TOML or YAML), which beats the flag's default. The file
// takes the flag names as keys (dashes or underscores).
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment variable of a flag.
const EnvPrefix = "TURBINE_"

// EnvName is the environment variable of flag name: TURBINE_ and the name
// upper-cased with dashes as underscores (pg-addr: TURBINE_PG_ADDR).
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Sources says where each flag's value came from ("default", "flag
// --x", "environment TURBINE_X", "config file f"), for error messages.
type Sources map[string]string

// Of is the source of flag name's value.
func (s Sources) Of(name string) string {
	if v, ok := s[name]; ok {
		return v
	}
	return "default"
}

// Load parses args into fs and then sets each flag the command line left
// alone from the environment (getenv), else from the config file whose
// path is the value of the flag configFlag (itself taken from the command
// line or the environment). It returns flag.ErrHelp for -h/--help.
func Load(fs *flag.FlagSet, args []string, getenv func(string) (string, bool), configFlag string) (Sources, error) {
	// While values are read, a refused one says what the flag accepts
	// (the flag package's own error is only "parse error").
	fs.VisitAll(func(f *flag.Flag) { f.Value = describe(f.Value) })
	defer fs.VisitAll(func(f *flag.Flag) {
		if d, ok := f.Value.(interface{ unwrap() flag.Value }); ok {
			f.Value = d.unwrap()
		}
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	src := Sources{}
	fs.Visit(func(f *flag.Flag) { src[f.Name] = "flag --" + f.Name })
	// The path of the file comes from the two sources above it.
	if _, set := src[configFlag]; !set {
		if v, ok := getenv(EnvName(configFlag)); ok && v != "" {
			if err := fs.Set(configFlag, v); err != nil {
				return nil, err
			}
			src[configFlag] = "environment " + EnvName(configFlag)
		}
	}
	var file map[string]string
	if cf := fs.Lookup(configFlag); cf != nil && cf.Value.String() != "" {
		var err error
		if file, err = readFile(cf.Value.String(), fs, configFlag); err != nil {
			return nil, err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if _, set := src[f.Name]; set || f.Name == configFlag {
			return
		}
		from, v, ok := "", "", false
		if v, ok = getenv(EnvName(f.Name)); ok {
			from = "environment " + EnvName(f.Name)
		} else if v, ok = file[f.Name]; ok {
			from = "config file " + fs.Lookup(configFlag).Value.String()
		}
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (from %s): %w", f.Name, from, err))
			return
		}
		src[f.Name] = from
	})
	return src, errors.Join(errs...)
}

// OneOf checks that the value of key is one of accepted (case-insensitive)
// and returns it as accepted spells it; the error names the key, where the
// value came from and the accepted values.
func OneOf(src Sources, key, value string, accepted ...string) (string, error) {
	for _, a := range accepted {
		if strings.EqualFold(value, a) {
			return a, nil
		}
	}
	shown := make([]string, len(accepted))
	for i, a := range accepted {
		shown[i] = a
		if a == "" {
			shown[i] = `"" (none)`
		}
	}
	return "", fmt.Errorf("%s %q (from %s) is not valid: accepted values are %s", key, value, src.Of(key), strings.Join(shown, ", "))
}

// readFile reads a TOML (.toml) or YAML (.yaml, .yml) file of flag values.
// Every key must be a flag of fs; lists become comma-separated values.
func readFile(path string, fs *flag.FlagSet, configFlag string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	raw := map[string]any{}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".toml":
		if _, err := toml.Decode(string(data), &raw); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	case ".yaml", ".yml":
		if err := yaml.Unmarshal(data, &raw); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("config file %s: unknown format %q: name it *.toml, *.yaml or *.yml", path, ext)
	}
	out := map[string]string{}
	var errs []error
	for k, v := range raw {
		name := strings.ReplaceAll(k, "_", "-")
		if fs.Lookup(name) == nil || name == configFlag {
			errs = append(errs, fmt.Errorf("config file %s: unknown key %q: accepted keys are the flags of the command (%s)", path, k, flagNames(fs, configFlag)))
			continue
		}
		s, err := scalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s: key %q: %w", path, k, err))
			continue
		}
		out[name] = s
	}
	return out, errors.Join(errs...)
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("a %T is not a flag value: use a string, number, boolean or list", v)
}

func flagNames(fs *flag.FlagSet, skip string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != skip {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// described is a flag's value whose Set, when it refuses a value, names
// the forms the flag accepts.
type described struct {
	flag.Value
	forms string
}

func (d *described) Set(v string) error {
	if err := d.Value.Set(v); err != nil {
		return fmt.Errorf("%q is not %s", v, d.forms)
	}
	return nil
}

// String is safe on the zero value, which the flag package makes to tell
// a flag's default from its zero.
func (d *described) String() string {
	if d == nil || d.Value == nil {
		return ""
	}
	return d.Value.String()
}

func (d *described) unwrap() flag.Value { return d.Value }

// describedBool keeps a boolean flag's -name (no value) form.
type describedBool struct{ *described }

func (describedBool) IsBoolFlag() bool { return true }

func (d describedBool) unwrap() flag.Value { return d.described.Value }

// describe wraps the values of the flag package's own kinds; other values
// already say what they accept.
func describe(v flag.Value) flag.Value {
	g, ok := v.(flag.Getter)
	if !ok {
		return v
	}
	var forms string
	switch g.Get().(type) {
	case bool:
		return describedBool{&described{Value: v, forms: "a boolean: true or false (also 1, 0, t, f)"}}
	case int, int64, uint, uint64:
		forms = "a whole number, e.g. 64"
	case float64:
		forms = "a number, e.g. 1.5"
	case time.Duration:
		forms = "a duration: a number with a unit, e.g. 500ms, 30s, 2m or 1h30m"
	default:
		return v
	}
	return &described{Value: v, forms: forms}
}
