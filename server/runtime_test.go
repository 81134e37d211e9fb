package server

import (
	"context"
	"encoding/json"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/version"
	"github.com/berth-runtime/berth/network"
)

func TestVersion(t *testing.T) {
	s, _ := newTestServer(t, nil)
	got, err := s.Version(context.Background(), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.RuntimeName != "berth" || got.RuntimeApiVersion != "v1" || got.Version != "0.1.0" || got.RuntimeVersion != version.Version {
		t.Errorf("Version = %v", got)
	}
}

func TestRuntimeConfig(t *testing.T) {
	tests := []struct {
		driver string
		want   runtimeapi.CgroupDriver
	}{
		{config.CgroupDriverCgroupfs, runtimeapi.CgroupDriver_CGROUPFS},
		{config.CgroupDriverSystemd, runtimeapi.CgroupDriver_SYSTEMD},
	}
	for _, tt := range tests {
		t.Run(tt.driver, func(t *testing.T) {
			s, _ := newTestServer(t, func(o *Options) { o.Config.CgroupDriver = tt.driver })
			got, err := s.RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetLinux() == nil || got.GetLinux().GetCgroupDriver() != tt.want {
				t.Errorf("RuntimeConfig = %v, want linux.cgroup_driver %s", got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	notReady := network.Condition{Reason: network.ReasonNotReady, Message: "no CNI config in /x"}
	tests := []struct {
		name     string
		network  network.Condition
		verbose  bool
		wantInfo bool
	}{
		{name: "network ready", network: network.Condition{Ready: true}},
		{name: "network not ready", network: notReady},
		{name: "verbose", network: notReady, verbose: true, wantInfo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t, func(o *Options) { o.Network = fakeNetwork(tt.network) })
			got, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: tt.verbose})
			if err != nil {
				t.Fatal(err)
			}
			conds := map[string]*runtimeapi.RuntimeCondition{}
			for _, c := range got.GetStatus().GetConditions() {
				conds[c.Type] = c
			}
			if rt := conds[runtimeapi.RuntimeReady]; rt == nil || !rt.Status {
				t.Errorf("RuntimeReady = %v, want true", rt)
			}
			net := conds[runtimeapi.NetworkReady]
			if net == nil || net.Status != tt.network.Ready || net.Reason != tt.network.Reason || net.Message != tt.network.Message {
				t.Errorf("NetworkReady = %v, want %+v", net, tt.network)
			}
			cfg, ok := got.Info["config"]
			if ok != tt.wantInfo {
				t.Fatalf("info[config] present = %v, want %v", ok, tt.wantInfo)
			}
			if ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(cfg), &m); err != nil || m["cgroup_driver"] != "cgroupfs" {
					t.Errorf("info[config] = %s (%v), want the config as JSON", cfg, err)
				}
			}
		})
	}
}

func TestStatusFeatures(t *testing.T) {
	s, _ := newTestServer(t, nil)
	got, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Errorf("features = %v, want supplemental_groups_policy", got.GetFeatures())
	}
	handlers := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range got.GetRuntimeHandlers() {
		handlers[h.GetName()] = h.GetFeatures()
	}
	accepted := []string{"", "berth", "runc"} // config.Default's
	if len(handlers) != len(accepted) {
		t.Errorf("runtime handlers %v, want one per accepted name %v", handlers, accepted)
	}
	for _, name := range accepted {
		f, ok := handlers[name]
		switch {
		case !ok:
			t.Errorf("handler %q not reported", name)
		case f.GetRecursiveReadOnlyMounts() != kernelHasMountSetattr():
			t.Errorf("handler %q: recursive_read_only_mounts = %v, kernel has mount_setattr: %v", name, f.GetRecursiveReadOnlyMounts(), kernelHasMountSetattr())
		case f.GetUserNamespaces():
			t.Errorf("handler %q: user_namespaces reported, but the options say none", name)
		}
	}
	s, _ = newTestServer(t, func(o *Options) { o.UserNamespaces = true })
	got, err = s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range got.GetRuntimeHandlers() {
		if !h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q: user_namespaces not reported", h.GetName())
		}
	}
	if got.GetRuntimeHandlers()[0].GetName() != "" {
		t.Errorf("first handler %q, want the default \"\"", got.GetRuntimeHandlers()[0].GetName())
	}
}

// TestStatusConfiguredHandlers: every [runtimes] table is listed, "" first
// and the rest by name, with what its settings leave of the features.
func TestStatusConfiguredHandlers(t *testing.T) {
	cfg, err := config.Parse(`
default_runtime = "strict"
[runtimes.strict]
disable_user_namespaces = true
[runtimes.test-handler]
[runtimes.no-rro]
disable_recursive_read_only_mounts = true
`)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, func(o *Options) { o.Config, o.UserNamespaces = cfg, true })
	got, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rro := kernelHasMountSetattr()
	want := []struct {
		name        string
		userns, rro bool
	}{{"", false, rro}, {"berth", true, rro}, {"no-rro", true, false}, {"runc", true, rro}, {"strict", false, rro}, {"test-handler", true, rro}}
	hs := got.GetRuntimeHandlers()
	if len(hs) != len(want) {
		t.Fatalf("handlers %v, want %v", hs, want)
	}
	for i, w := range want {
		h := hs[i]
		if h.GetName() != w.name || h.GetFeatures().GetUserNamespaces() != w.userns || h.GetFeatures().GetRecursiveReadOnlyMounts() != w.rro {
			t.Errorf("handler %d: %v, want %+v", i, h, w)
		}
	}
}
