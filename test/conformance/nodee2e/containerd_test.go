package main

import (
	"testing"

	"github.com/BurntSushi/toml"
)

func TestContainerdConfig(t *testing.T) {
	c := &containerd{root: "/w/containerd", runc: "/cache/runc", cniBinDir: "/cache/cni", certsD: "/reg/certs.d"}
	var cfg struct {
		Version int
		GRPC    struct{ Address string }
		Plugins map[string]map[string]any
	}
	if _, err := toml.Decode(c.config(), &cfg); err != nil {
		t.Fatalf("containerd config is not TOML: %v\n%s", err, c.config())
	}
	if cfg.Version != 3 || cfg.GRPC.Address != "/w/containerd/containerd.sock" {
		t.Errorf("version %d, address %q", cfg.Version, cfg.GRPC.Address)
	}
	images := cfg.Plugins["io.containerd.cri.v1.images"]
	if got := images["registry"].(map[string]any)["config_path"]; got != "/reg/certs.d" {
		t.Errorf("config_path = %v", got)
	}
	rt := cfg.Plugins["io.containerd.cri.v1.runtime"]
	runtimes := rt["containerd"].(map[string]any)["runtimes"].(map[string]any)
	for _, h := range []string{"runc", "test-handler"} {
		r, ok := runtimes[h].(map[string]any)
		if !ok {
			t.Fatalf("no runtime handler %q in %v", h, runtimes)
		}
		opts := r["options"].(map[string]any)
		if r["runtime_type"] != "io.containerd.runc.v2" || opts["BinaryName"] != "/cache/runc" || opts["SystemdCgroup"] != false {
			t.Errorf("handler %s: %v", h, r)
		}
	}
	// The longest work dir os.MkdirTemp("", "berth-node-e2e.") makes.
	c = &containerd{work: "/tmp/berth-node-e2e.4294967295"}
	c.root = c.work + "/containerd"
	if d := c.shimSocketDir(); len(d) > 42 {
		t.Errorf("shim socket_dir %q is %d bytes, containerd takes 42 at most", d, len(d))
	}
	if got := rt["cni"].(map[string]any)["conf_dir"]; got != "/w/containerd/net.d" {
		t.Errorf("cni conf_dir = %v", got)
	}
}
