package config

import (
	"reflect"
	"testing"
)

func TestNetworkKeys(t *testing.T) {
	tests := []struct {
		name, toml string
		want       func(*Config)
		wantErr    string
	}{
		{name: "default network", toml: "pause_image = \"\"\n[cni]\ndefault_network = true\ndefault_bridge = \"br1\"\ndefault_subnet = \"10.1.0.0/16\"",
			want: func(c *Config) {
				c.CNI.DefaultNetwork, c.CNI.DefaultBridge, c.CNI.DefaultSubnet = true, "br1", "10.1.0.0/16"
			}},
		{name: "bad subnet", toml: "[cni]\ndefault_subnet = \"10.1.0.0\"", wantErr: `invalid cni.default_subnet "10.1.0.0": want a CIDR such as 10.88.0.0/16`},
		{name: "long bridge", toml: "[cni]\ndefault_bridge = \"averyveryverylongname\"", wantErr: `invalid cni.default_bridge "averyveryverylongname": want an interface name of at most 15 characters without '/', ':' or spaces`},
		{name: "bridge with slash", toml: "[cni]\ndefault_bridge = \"a/b\"", wantErr: `invalid cni.default_bridge "a/b": want an interface name of at most 15 characters without '/', ':' or spaces`},
		{name: "default network on the pod CIDR", toml: "[cni]\ndefault_network = true\ndefault_pod_cidr = true\ndefault_masquerade = false\ndefault_bridge = \"cni0\"",
			want: func(c *Config) {
				c.CNI.DefaultNetwork, c.CNI.DefaultPodCIDR, c.CNI.DefaultMasquerade, c.CNI.DefaultBridge = true, true, false, "cni0"
			}},
		{name: "masquerade by default", toml: "[cni]\ndefault_network = true", want: func(c *Config) { c.CNI.DefaultNetwork = true }},
		{name: "pod CIDR without default network", toml: "[cni]\ndefault_pod_cidr = true", wantErr: "cni.default_pod_cidr needs cni.default_network = true"},
		{name: "pod CIDR and subnet", toml: "[cni]\ndefault_network = true\ndefault_pod_cidr = true\ndefault_subnet = \"10.1.0.0/16\"",
			wantErr: "cni.default_pod_cidr and cni.default_subnet exclude each other: the pod CIDR is the default network's subnet"},
		{name: "masquerade not a bool", toml: "[cni]\ndefault_masquerade = \"no\"", wantErr: `wrong type for key "cni.default_masquerade": want a boolean (true or false), got the string "no"`},
		{name: "pause image", toml: `pause_image = "registry.k8s.io/pause:3.10"`, want: func(c *Config) { c.PauseImage = "registry.k8s.io/pause:3.10" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.toml)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
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
