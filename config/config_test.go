package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type vals struct {
	addr, level, brokers, cfg string
	every                     time.Duration
	tls                       bool
}

func newFS() (*flag.FlagSet, *vals) {
	v := &vals{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.StringVar(&v.cfg, "config", "", "")
	fs.StringVar(&v.addr, "pg-addr", "default-addr", "")
	fs.StringVar(&v.level, "log-level", "info", "")
	fs.StringVar(&v.brokers, "brokers", "", "")
	fs.DurationVar(&v.every, "commit-interval", time.Second, "")
	fs.BoolVar(&v.tls, "kafka-tls", false, "")
	return fs, v
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence: flag > environment > file > default, key by key, for
// TOML and YAML files alike.
func TestPrecedence(t *testing.T) {
	files := map[string]string{
		"c.toml": "pg-addr = \"file-addr\"\nlog_level = \"warn\"\nbrokers = [\"a:1\", \"b:2\"]\ncommit-interval = \"5s\"\nkafka-tls = true\n",
		"c.yaml": "pg-addr: file-addr\nlog_level: warn\nbrokers: [a:1, b:2]\ncommit-interval: 5s\nkafka-tls: true\n",
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			path := write(t, name, content)
			fs, v := newFS()
			src, err := Load(fs, []string{"--config", path, "--pg-addr", "flag-addr"},
				envOf(map[string]string{"TURBINE_PG_ADDR": "env-addr", "TURBINE_LOG_LEVEL": "debug"}), "config")
			if err != nil {
				t.Fatal(err)
			}
			if v.addr != "flag-addr" || v.level != "debug" || v.brokers != "a:1,b:2" || v.every != 5*time.Second || !v.tls {
				t.Fatalf("got %+v", *v)
			}
			if src.Of("pg-addr") != "flag --pg-addr" || src.Of("log-level") != "environment TURBINE_LOG_LEVEL" ||
				!strings.HasPrefix(src.Of("brokers"), "config file ") {
				t.Fatalf("sources %v", src)
			}
		})
	}
	// Nothing set anywhere: the defaults, and the config path from the env.
	fs, v := newFS()
	path := write(t, "c.yml", "log-level: error\n")
	if _, err := Load(fs, nil, envOf(map[string]string{"TURBINE_CONFIG": path}), "config"); err != nil {
		t.Fatal(err)
	}
	if v.addr != "default-addr" || v.level != "error" || v.every != time.Second {
		t.Fatalf("got %+v", *v)
	}
}

func TestRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		file [2]string
		want string
	}{
		"unknown file key": {file: [2]string{"c.toml", "pg_adr = \"x\"\n"}, want: `unknown key "pg_adr"`},
		"bad file value":   {file: [2]string{"c.toml", "commit-interval = \"soon\"\n"}, want: "commit-interval (from config file"},
		"bad env value":    {env: map[string]string{"TURBINE_KAFKA_TLS": "maybe"}, want: "kafka-tls (from environment TURBINE_KAFKA_TLS)"},
		"nested table":     {file: [2]string{"c.toml", "[pg-addr]\nx = 1\n"}, want: `key "pg-addr"`},
		"unknown format":   {file: [2]string{"c.ini", "a=b\n"}, want: "name it *.toml, *.yaml or *.yml"},
		"bad TOML":         {file: [2]string{"c.toml", "pg-addr = \n"}, want: "config file"},
		"stray argument":   {args: []string{"serve"}, want: `unexpected argument "serve"`},
	} {
		t.Run(name, func(t *testing.T) {
			fs, _ := newFS()
			args := tc.args
			if tc.file[0] != "" {
				args = append(args, "--config", write(t, tc.file[0], tc.file[1]))
			}
			_, err := Load(fs, args, envOf(tc.env), "config")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	fs, _ := newFS()
	if _, err := Load(fs, []string{"--help"}, envOf(nil), "config"); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
}

func TestOneOf(t *testing.T) {
	src := Sources{"log-format": "environment TURBINE_LOG_FORMAT"}
	if v, err := OneOf(src, "log-format", "JSON", "text", "json"); err != nil || v != "json" {
		t.Fatalf("%q %v", v, err)
	}
	_, err := OneOf(src, "log-format", "xml", "text", "json")
	if err == nil || err.Error() != `log-format "xml" (from environment TURBINE_LOG_FORMAT) is not valid: accepted values are text, json` {
		t.Fatalf("%v", err)
	}
}
