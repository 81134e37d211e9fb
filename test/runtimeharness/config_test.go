package runtimeharness

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func decode(t *testing.T, text string) map[string]any {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode(text, &m); err != nil {
		t.Fatalf("not TOML: %v\n%s", err, text)
	}
	return m
}

// at walks a decoded TOML document by keys.
func at(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func TestBerthConfigTOML(t *testing.T) {
	base := BerthConfig{Socket: "/w/berth.sock", Root: "/w/root", State: "/w/state", CNIConfDir: "/w/net.d", CNIBinDir: "/cni", Registry: "reg:5000", Mirrored: []string{"docker.io", "registry.k8s.io"}}
	full := base
	full.LogLevel, full.CgroupDriver, full.PodProcess, full.RegistryConfigPath = "debug", "systemd", "podproc", "/certs.d"
	full.DefaultBridge, full.DefaultSubnet = "br0", "10.1.0.0/16"
	full.NRI = &NRI{Socket: "/w/nri.sock", PluginPath: "/w/p", PluginConfigPath: "/w/c", RequestTimeout: "10s"}
	full.RuntimeHandlers = []string{"test-handler"}
	for _, tc := range []struct {
		name string
		cfg  BerthConfig
		want map[string]any // keys joined by "." (one level of tables) to values
		none []string       // top-level keys that must be absent
	}{
		{
			name: "defaults left out",
			cfg:  base,
			want: map[string]any{"address": "/w/berth.sock", "state": "/w/state", "cni.conf_dir": "/w/net.d", "cni.bin_dirs": []any{"/cni"}},
			none: []string{"log_level", "cgroup_driver", "pod_process", "registry_config_path", "nri", "runtimes"},
		},
		{
			name: "every field",
			cfg:  full,
			want: map[string]any{
				"log_level": "debug", "cgroup_driver": "systemd", "pod_process": "podproc", "registry_config_path": "/certs.d",
				"cni.default_network": true, "cni.default_bridge": "br0", "cni.default_subnet": "10.1.0.0/16",
				"nri.enable": true, "nri.socket_path": "/w/nri.sock", "nri.plugin_request_timeout": "10s",
				"runtimes.test-handler": map[string]any{},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, tc.cfg.TOML())
			for k, want := range tc.want {
				table, key, ok := strings.Cut(k, ".")
				got := m[k]
				if ok {
					got = at(m, table, key)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v, want %#v", k, got, want)
				}
			}
			for _, k := range tc.none {
				if _, ok := m[k]; ok {
					t.Errorf("%s set, want berth's default", k)
				}
			}
			for _, h := range tc.cfg.Mirrored {
				if got := at(m, "registries", h, "mirrors"); !reflect.DeepEqual(got, []any{"http://reg:5000"}) {
					t.Errorf("registries.%s.mirrors = %v", h, got)
				}
			}
		})
	}
}

func TestContainerdConfigTOML(t *testing.T) {
	const cri, rt = "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"
	base := ContainerdConfig{Root: "/w/root", State: "/w/state", Socket: "/w/c.sock", SandboxImage: "pause:1", CertsDir: "/w/certs.d", Runc: "/bin/runc", CNIBinDir: "/cni", CNIConfDir: "/w/net.d", OptDir: "/w/opt", ShimSocketDir: "/w/s"}
	full := base
	full.SystemdCgroup, full.RestrictOOMScoreAdj, full.NetnsUnderState = true, true, true
	full.RuntimeHandlers = []string{"test-handler"}
	full.NRI = &NRI{Socket: "/w/nri.sock", PluginPath: "/w/p", PluginConfigPath: "/w/c", RequestTimeout: "10s"}
	full.ImageVerifierDir = "/w/iv"
	for _, tc := range []struct {
		name     string
		cfg      ContainerdConfig
		handlers []string
		want     map[string]any // paths under plugins, "/"-free keys walked in order
	}{
		{
			name: "NRI off, runc only", cfg: base, handlers: []string{"runc"},
			want: map[string]any{"nri": map[string]any{"disable": true}, "oom": false, "netns": nil, "verifier": nil, "systemd": false},
		},
		{
			name: "every field", cfg: full, handlers: []string{"runc", "test-handler"},
			want: map[string]any{
				"nri": map[string]any{"disable": false, "socket_path": "/w/nri.sock", "plugin_path": "/w/p", "plugin_config_path": "/w/c", "plugin_request_timeout": "10s"},
				"oom": true, "netns": true, "verifier": "/w/iv", "systemd": true,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, tc.cfg.TOML())
			if m["version"] != int64(3) || at(m, "grpc", "address") != "/w/c.sock" || at(m, "ttrpc", "address") != "/w/c.sock.ttrpc" {
				t.Errorf("version %v, grpc %v, ttrpc %v", m["version"], at(m, "grpc", "address"), at(m, "ttrpc", "address"))
			}
			p := func(keys ...string) any { return at(m, append([]string{"plugins"}, keys...)...) }
			if p(cri, "pinned_images", "sandbox") != "pause:1" || p(cri, "registry", "config_path") != "/w/certs.d" {
				t.Errorf("images plugin: %v", p(cri))
			}
			got := map[string]any{
				"nri": p("io.containerd.nri.v1.nri"), "oom": p(rt, "restrict_oom_score_adj"), "netns": p(rt, "netns_mounts_under_state_dir"),
				"verifier": p("io.containerd.image-verifier.v1.bindir", "bin_dir"), "systemd": p(rt, "containerd", "runtimes", "runc", "options", "SystemdCgroup"),
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			runtimes, _ := p(rt, "containerd", "runtimes").(map[string]any)
			if len(runtimes) != len(tc.handlers) {
				t.Errorf("runtimes %v, want %v", runtimes, tc.handlers)
			}
			for _, h := range tc.handlers {
				if at(runtimes, h, "options", "BinaryName") != "/bin/runc" || at(runtimes, h, "runtime_type") != "io.containerd.runc.v2" {
					t.Errorf("handler %s: %v", h, runtimes[h])
				}
			}
		})
	}
}

func TestWriteHostsTOML(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"docker.io", "registry.k8s.io"}
	if err := WriteHostsTOML(dir, "reg:5000", hosts); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		text, err := os.ReadFile(filepath.Join(dir, h, "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, string(text))
		if m["server"] != "https://"+h || !reflect.DeepEqual(at(m, "host", "http://reg:5000", "capabilities"), []any{"pull", "resolve"}) {
			t.Errorf("%s: %v", h, m)
		}
	}
}
