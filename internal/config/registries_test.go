package config

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRegistries(t *testing.T) {
	cfg, err := Parse(`
image_pull_stall_timeout = "30s"
registry_config_path = "/etc/containerd/certs.d"
[registries."registry.k8s.io"]
mirrors = ["http://127.0.0.1:5000", "https://mirror.example"]
[registries."127.0.0.1:5000"]
insecure = true
username = "alice"
password = "s3cret"
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Registry{
		"registry.k8s.io": {Mirrors: []string{"http://127.0.0.1:5000", "https://mirror.example"}},
		"127.0.0.1:5000":  {Insecure: true, Username: "alice", Password: "s3cret"},
	}
	if !reflect.DeepEqual(cfg.Registries, want) || cfg.ImagePullStallTimeout != "30s" || cfg.RegistryConfigPath != "/etc/containerd/certs.d" {
		t.Errorf("got %+v %q %q", cfg.Registries, cfg.ImagePullStallTimeout, cfg.RegistryConfigPath)
	}

	var b bytes.Buffer
	if err := cfg.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip changed the config:\n%s", b.String())
	}
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "s3cret") {
		t.Errorf("password shown: %s", js)
	}
}

func TestRegistriesInvalid(t *testing.T) {
	tests := map[string]string{
		"mirror path":      `[registries."docker.io"]` + "\nmirrors = [\"http://127.0.0.1:5000/v2\"]",
		"mirror scheme":    `[registries."docker.io"]` + "\nmirrors = [\"127.0.0.1:5000\"]",
		"stall":            `image_pull_stall_timeout = "soon"`,
		"relative certs.d": `registry_config_path = "etc/containerd/certs.d"`,
		"unknown key":      `[registries."docker.io"]` + "\nmirror = [\"http://127.0.0.1:5000\"]",
	}
	for name, doc := range tests {
		cfg, err := Parse(doc)
		if err == nil {
			err = cfg.Validate()
		}
		var ve *ValueError
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "unknown key" && !errors.As(err, &ve) {
			t.Errorf("%s: %v is not a ValueError", name, err)
		}
	}
}
