package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEveryKeyDocumented(t *testing.T) {
	err := walkLeaves(nil, reflect.ValueOf(Default()).Elem(), func(l leaf) error {
		if l.field.Tag.Get("doc") == "" {
			t.Errorf("key %s has no doc tag", l.key())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteTOMLRoundTrip(t *testing.T) {
	custom := Default()
	custom.Address = "/tmp/x/berth.sock"
	custom.CgroupDriver = CgroupDriverSystemd
	custom.MetricsAddress = "127.0.0.1:9090"
	custom.SocketGroup = "kube"
	custom.CNI.BinDirs = []string{"/a", "/b b", `/c"quote`}
	custom.CNI.BinDirs = append(custom.CNI.BinDirs, "/d")

	for name, cfg := range map[string]*Config{"default": Default(), "custom": custom} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := cfg.WriteTOML(&b); err != nil {
				t.Fatal(err)
			}
			got, err := Parse(b.String())
			if err != nil {
				t.Fatalf("parse back: %v\n%s", err, b.String())
			}
			if !reflect.DeepEqual(got, cfg) {
				t.Errorf("round trip changed the config:\n got %+v\nwant %+v\n%s", got, cfg, b.String())
			}
		})
	}
}

func TestWriteTOMLCommentsEveryKey(t *testing.T) {
	var b bytes.Buffer
	if err := Default().WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, line := range lines {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i == 0 || !strings.HasPrefix(lines[i-1], "#") {
			t.Errorf("line %d %q has no comment above it", i+1, line)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		toml    string
		want    func(*Config) // applied to Default() to get the expected config
		wantErr string        // the whole error message
	}{
		{name: "empty", toml: "", want: func(*Config) {}},
		{
			name: "every key",
			toml: `
address = "/tmp/b.sock"
root = "/tmp/root"
state = "/tmp/state"
cgroup_driver = "systemd"
log_level = "debug"
log_format = "json"
metrics_address = ":9100"
socket_group = "1000"
[cni]
conf_dir = "/tmp/net.d"
bin_dirs = ["/x", "/y"]
`,
			want: func(c *Config) {
				c.Address, c.Root, c.State = "/tmp/b.sock", "/tmp/root", "/tmp/state"
				c.CgroupDriver, c.LogLevel, c.LogFormat = "systemd", "debug", "json"
				c.MetricsAddress, c.SocketGroup = ":9100", "1000"
				c.CNI.ConfDir, c.CNI.BinDirs = "/tmp/net.d", []string{"/x", "/y"}
			},
		},
		{name: "unix scheme stripped", toml: `address = "unix:///run/x.sock"`, want: func(c *Config) { c.Address = "/run/x.sock" }},
		{name: "inline table", toml: `cni = { conf_dir = "/n" }`, want: func(c *Config) { c.CNI.ConfDir = "/n" }},
		{name: "empty bin dirs", toml: "[cni]\nbin_dirs = []", want: func(c *Config) { c.CNI.BinDirs = []string{} }},
		{name: "CDI off, own spec dirs", toml: "enable_cdi = false\ncdi_spec_dirs = [\"/srv/cdi\"]", want: func(c *Config) { c.EnableCDI, c.CDISpecDirs = false, []string{"/srv/cdi"} }},
		{name: "relative CDI spec dir", toml: `cdi_spec_dirs = ["cdi"]`, wantErr: `invalid cdi_spec_dirs "cdi": want an absolute path`},
		{name: "unknown key", toml: `adress = "/x"`, wantErr: `unknown key "adress"`},
		{name: "unknown nested key", toml: "[cni]\nconfdir = \"/x\"", wantErr: `unknown key "cni.confdir"`},
		{name: "unknown table", toml: "[foo]\na = 1\nb = 2", wantErr: `unknown key "foo"`},
		{name: "two unknown keys", toml: "a = 1\nb = 2", wantErr: `unknown keys "a", "b"`},
		{name: "string as integer", toml: `address = 5`, wantErr: `wrong type for key "address": want a string, got the integer 5`},
		{name: "list as string", toml: "[cni]\nbin_dirs = \"/opt/cni/bin\"", wantErr: `wrong type for key "cni.bin_dirs": want an array of strings, got the string "/opt/cni/bin"`},
		{name: "list of integers", toml: "[cni]\nbin_dirs = [1]", wantErr: `wrong type for key "cni.bin_dirs": want an array of strings, got an array containing the integer 1`},
		{name: "table as string", toml: `cni = "x"`, wantErr: `wrong type for key "cni": want a table, got the string "x"`},
		{name: "bad cgroup driver", toml: `cgroup_driver = "foo"`, wantErr: `invalid cgroup_driver "foo": want cgroupfs or systemd`},
		{name: "bad log level", toml: `log_level = "trace"`, wantErr: `invalid log_level "trace": want debug, info, warn or error`},
		{name: "bad log format", toml: `log_format = "xml"`, wantErr: `invalid log_format "xml": want text or json`},
		{name: "relative root", toml: `root = "var/lib/berth"`, wantErr: `invalid root "var/lib/berth": want an absolute path`},
		{name: "empty state", toml: `state = ""`, wantErr: `invalid state "": want a non-empty value`},
		{name: "relative bin dir", toml: "[cni]\nbin_dirs = [\"/ok\", \"bin\"]", wantErr: `invalid cni.bin_dirs "bin": want an absolute path`},
		{name: "bad metrics address", toml: `metrics_address = "localhost"`, wantErr: `invalid metrics_address "localhost": want host:port`},
		{name: "bad metrics port", toml: `metrics_address = "localhost:http"`, wantErr: `invalid metrics_address "localhost:http": want host:port with a numeric port`},
		{name: "bad stream address", toml: `stream_address = "127.0.0.1"`, wantErr: `invalid stream_address "127.0.0.1": want host:port`},
		{name: "empty stream address", toml: `stream_address = ""`, wantErr: `invalid stream_address "": want a non-empty value`},
		{name: "sampling rate over a million", toml: "[tracing]\nsampling_rate_per_million = 1000001", wantErr: `invalid tracing.sampling_rate_per_million "1000001": want 0 to 1000000`},
		{name: "bad tracing endpoint", toml: "[tracing]\nendpoint = \"collector\"", wantErr: `invalid tracing.endpoint "collector": want host:port`},
		{name: "syntax error", toml: "address = ", wantErr: "line 1: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.toml)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse succeeded, want error %q", tt.wantErr)
				}
				if strings.HasSuffix(tt.wantErr, " ") && strings.HasPrefix(err.Error(), tt.wantErr) {
					return
				}
				if err.Error() != tt.wantErr {
					t.Fatalf("error\n got %q\nwant %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	systemd := file("systemd.toml", "cgroup_driver = \"systemd\"\n[cni]\nbin_dirs = [\"/file\"]\n")
	bad := file("bad.toml", `cgroup_driver = "foo"`)
	unknown := file("unknown.toml", "[cni]\nconfdir = \"/x\"\n")
	missing := filepath.Join(dir, "missing.toml")

	tests := []struct {
		name        string
		defaultPath string // replaces DefaultPath
		args        []string
		want        func(*Config)
		wantErr     string
	}{
		{name: "missing default file is fine", defaultPath: missing, want: func(*Config) {}},
		{name: "default file is read", defaultPath: systemd, want: func(c *Config) {
			c.CgroupDriver = "systemd"
			c.CNI.BinDirs = []string{"/file"}
		}},
		{name: "missing explicit file", args: []string{"--config", missing}, wantErr: "config " + missing + ": no such file or directory"},
		{name: "explicit file missing even at the default path", defaultPath: missing, args: []string{"--config", missing}, wantErr: "config " + missing + ": no such file or directory"},
		{name: "file over defaults", args: []string{"--config", systemd}, want: func(c *Config) {
			c.CgroupDriver = "systemd"
			c.CNI.BinDirs = []string{"/file"}
		}},
		{name: "CDI flags", args: []string{"--config", systemd, "--enable-cdi=false", "--cdi-spec-dir", "/a", "--cdi-spec-dir=/b"}, want: func(c *Config) {
			c.CgroupDriver = "systemd"
			c.CNI.BinDirs = []string{"/file"}
			c.EnableCDI, c.CDISpecDirs = false, []string{"/a", "/b"}
		}},
		{name: "flags over file", args: []string{"--config", systemd, "--cgroup-driver", "cgroupfs", "--cni-bin-dir", "/a,/b", "--cni-bin-dir=/c"}, want: func(c *Config) {
			c.CNI.BinDirs = []string{"/a", "/b", "/c"}
		}},
		{name: "every flag", defaultPath: missing, args: []string{
			"--address", "unix:///s/b.sock", "--root", "/r", "--state", "/s", "--cgroup-driver", "systemd",
			"--log-level", "warn", "--log-format", "json", "--metrics-address", "127.0.0.1:0",
			"--socket-group", "adm", "--cni-conf-dir", "/n", "--cni-bin-dir", "/b",
		}, want: func(c *Config) {
			c.Address, c.Root, c.State = "/s/b.sock", "/r", "/s"
			c.CgroupDriver, c.LogLevel, c.LogFormat = "systemd", "warn", "json"
			c.MetricsAddress, c.SocketGroup = "127.0.0.1:0", "adm"
			c.CNI.ConfDir, c.CNI.BinDirs = "/n", []string{"/b"}
		}},
		{name: "invalid flag value", defaultPath: missing, args: []string{"--cgroup-driver", "foo"}, wantErr: `invalid --cgroup-driver "foo": want cgroupfs or systemd`},
		{name: "flag fixes invalid file value", args: []string{"--config", bad, "--cgroup-driver", "systemd"}, want: func(c *Config) { c.CgroupDriver = "systemd" }},
		{name: "invalid file value", args: []string{"--config", bad}, wantErr: "config " + bad + `: invalid cgroup_driver "foo": want cgroupfs or systemd`},
		{name: "unknown file key", args: []string{"--config", unknown}, wantErr: "config " + unknown + `: unknown key "cni.confdir"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("berth", flag.ContinueOnError)
			flags := RegisterFlags(fs)
			if tt.defaultPath != "" {
				flags.path = tt.defaultPath
			}
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := flags.Load()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error\n got %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestEveryErrorIsOneLine(t *testing.T) {
	for _, doc := range []string{"a = 1\nb = 2", "address = 5", "[cni]\nbin_dirs = [1]", `log_level = "x"`, "= x"} {
		if _, err := Parse(doc); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) = %q, want a one-line error", doc, err)
		}
	}
}

func TestJSONRedactsSecrets(t *testing.T) {
	type auth struct {
		Username string `toml:"username"`
		Password string `toml:"password" secret:"true"`
	}
	type registry struct {
		Mirrors []string `toml:"mirrors"`
		Auth    auth     `toml:"auth"`
	}
	type withSecrets struct {
		Address    string              `toml:"address"`
		Registries map[string]registry `toml:"registries"`
	}
	v := withSecrets{Address: "/s", Registries: map[string]registry{
		"docker.io": {Mirrors: []string{"http://m"}, Auth: auth{Username: "u", Password: "hunter2"}},
	}}
	b, err := json.Marshal(toMap(reflect.ValueOf(v)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"address":"/s","registries":{"docker.io":{"auth":{"password":"\u003credacted\u003e","username":"u"},"mirrors":["http://m"]}}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}

	got, err := Default().JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"cgroup_driver":"cgroupfs"`) || !strings.Contains(string(got), `"conf_dir":"/etc/cni/net.d"`) {
		t.Errorf("Default().JSON() = %s", got)
	}
}

func TestKeyPath(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{[]string{"address"}, "address"},
		{[]string{"cni", "conf_dir"}, "cni.conf_dir"},
		{[]string{"registries", "docker.io", "mirrors"}, `registries."docker.io".mirrors`},
		{[]string{"registries", "localhost:5000"}, `registries."localhost:5000"`},
	}
	for _, tt := range tests {
		if got := keyPath(tt.parts); got != tt.want {
			t.Errorf("keyPath(%q) = %s, want %s", tt.parts, got, tt.want)
		}
	}
}

// Later keys such as [registries."host"] are maps of tables; the writer
// must handle them before the first one is added.
func TestWriteTableMapRoundTrip(t *testing.T) {
	type registry struct {
		Mirrors  []string `toml:"mirrors" doc:"Mirrors, tried in order."`
		Insecure bool     `toml:"insecure" doc:"Plain HTTP."`
	}
	type cfg struct {
		Pause      string              `toml:"pause_image" doc:"Pause image."`
		Registries map[string]registry `toml:"registries" doc:"Per-registry settings."`
	}
	in := cfg{Pause: "p", Registries: map[string]registry{
		"docker.io":      {Mirrors: []string{"http://127.0.0.1:5000"}},
		"localhost:5000": {Mirrors: []string{}, Insecure: true},
	}}
	var b bytes.Buffer
	if err := writeTable(&b, nil, reflect.ValueOf(in)); err != nil {
		t.Fatal(err)
	}
	var out cfg
	if _, err := toml.Decode(b.String(), &out); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: got %+v, want %+v\n%s", out, in, b.String())
	}
	if !strings.Contains(b.String(), `[registries."localhost:5000"]`) {
		t.Errorf("no quoted table header in\n%s", b.String())
	}
}
