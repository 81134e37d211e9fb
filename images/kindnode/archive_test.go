package main

import "testing"

func TestNodeConfig(t *testing.T) {
	for _, tc := range []struct{ arch, variant string }{
		{"amd64", ""},
		{"arm64", "v8"},
	} {
		c := nodeConfig(tc.arch, "inputs", "abc")
		if c.Architecture != tc.arch || c.Variant != tc.variant || c.OS != "linux" {
			t.Errorf("%s: platform %s/%s/%s", tc.arch, c.OS, c.Architecture, c.Variant)
		}
		if c.Config.StopSignal != "SIGRTMIN+3" || len(c.Config.Entrypoint) != 2 || c.Config.Labels["io.berth.node.inputs"] != "inputs" {
			t.Errorf("%s: config %+v", tc.arch, c.Config)
		}
		if len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0].String() != "sha256:abc" {
			t.Errorf("%s: diff ids %v", tc.arch, c.RootFS.DiffIDs)
		}
	}
}
