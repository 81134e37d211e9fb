package network

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/network/cnitest"
)

// renderedBridge is the part of the default conflist the options change.
type renderedBridge struct {
	IPMasq bool `json:"ipMasq"`
	IPAM   struct {
		Ranges [][]struct {
			Subnet string `json:"subnet"`
		} `json:"ranges"`
		Routes []struct {
			Dst string `json:"dst"`
		} `json:"routes"`
	} `json:"ipam"`
}

func TestDefaultConflist(t *testing.T) {
	tests := []struct {
		name       string
		d          DefaultNetwork
		subnets    []string // nil renders d.Subnet
		wantMasq   bool
		wantRanges []string
		wantRoutes []string
		wantErr    string
	}{
		{name: "defaults", wantMasq: true, wantRanges: []string{"10.88.0.0/16"}, wantRoutes: []string{"0.0.0.0/0"}},
		{name: "subnet normalised", d: DefaultNetwork{Subnet: "10.77.1.5/16"}, wantMasq: true, wantRanges: []string{"10.77.0.0/16"}, wantRoutes: []string{"0.0.0.0/0"}},
		{name: "no masquerade", d: DefaultNetwork{NoMasquerade: true}, wantRanges: []string{"10.88.0.0/16"}, wantRoutes: []string{"0.0.0.0/0"}},
		{name: "pod CIDR", subnets: []string{"10.244.1.0/24"}, wantMasq: true, wantRanges: []string{"10.244.1.0/24"}, wantRoutes: []string{"0.0.0.0/0"}},
		{name: "dual-stack pod CIDR", subnets: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, wantMasq: true,
			wantRanges: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}, wantRoutes: []string{"0.0.0.0/0", "::/0"}},
		{name: "two v4 subnets", subnets: []string{"10.244.1.0/24", "10.245.1.0/24"}, wantErr: "at most one per IP family"},
		{name: "bad subnet", d: DefaultNetwork{Subnet: "nonsense"}, wantErr: "default network subnet"},
		{name: "no subnet", subnets: []string{}, wantErr: "no subnet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data []byte
			var err error
			if tt.subnets == nil {
				data, err = tt.d.Conflist()
			} else {
				data, err = tt.d.conflist(tt.subnets)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				Name    string            `json:"name"`
				Plugins []json.RawMessage `json:"plugins"`
			}
			if err := json.Unmarshal(data, &conf); err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, p := range conf.Plugins {
				var typ struct{ Type string }
				json.Unmarshal(p, &typ)
				types = append(types, typ.Type)
			}
			if got := strings.Join(types, ","); got != "bridge,portmap,loopback,firewall" || conf.Name != DefaultName {
				t.Fatalf("network %s plugins = %s", conf.Name, got)
			}
			var br renderedBridge
			if err := json.Unmarshal(conf.Plugins[0], &br); err != nil {
				t.Fatal(err)
			}
			var ranges, routes []string
			for _, set := range br.IPAM.Ranges {
				for _, r := range set {
					ranges = append(ranges, r.Subnet)
				}
			}
			for _, r := range br.IPAM.Routes {
				routes = append(routes, r.Dst)
			}
			if br.IPMasq != tt.wantMasq || !reflect.DeepEqual(ranges, tt.wantRanges) || !reflect.DeepEqual(routes, tt.wantRoutes) {
				t.Errorf("ipMasq %v ranges %v routes %v, want %v %v %v", br.IPMasq, ranges, routes, tt.wantMasq, tt.wantRanges, tt.wantRoutes)
			}
		})
	}
}

func TestWriteDefaultForPodCIDRs(t *testing.T) {
	d := DefaultNetwork{Bridge: "cni0", FollowPodCIDR: true, NoMasquerade: true}
	own := DefaultNetworkFile
	tests := []struct {
		name        string
		existing    map[string]string // file -> body
		cidrs       []string
		wantWritten bool
		wantInUse   string
		wantSubnet  string // in berth's file afterwards; "" = no file
	}{
		{name: "empty dir", cidrs: []string{"10.244.1.0/24"}, wantWritten: true, wantInUse: own, wantSubnet: "10.244.1.0/24"},
		{name: "changed CIDR", existing: map[string]string{own: "10.244.1.0/24"}, cidrs: []string{"10.244.2.0/24"}, wantWritten: true, wantInUse: own, wantSubnet: "10.244.2.0/24"},
		{name: "same CIDR", existing: map[string]string{own: "10.244.1.0/24"}, cidrs: []string{"10.244.1.0/24"}, wantInUse: own, wantSubnet: "10.244.1.0/24"},
		{name: "later config ignored", existing: map[string]string{own: "10.244.1.0/24", "99-other.conflist": bridgeConflist}, cidrs: []string{"10.244.3.0/24"},
			wantWritten: true, wantInUse: own, wantSubnet: "10.244.3.0/24"},
		{name: "another config in use", existing: map[string]string{"05-flannel.conflist": bridgeConflist}, cidrs: []string{"10.244.1.0/24"}, wantInUse: "05-flannel.conflist"},
		{name: "another config before ours", existing: map[string]string{"05-flannel.conflist": bridgeConflist, own: "10.244.1.0/24"}, cidrs: []string{"10.244.9.0/24"},
			wantInUse: "05-flannel.conflist", wantSubnet: "10.244.1.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			os.MkdirAll(dir, 0o755)
			for f, body := range tt.existing {
				if f == own {
					data, err := d.conflist([]string{body})
					if err != nil {
						t.Fatal(err)
					}
					body = string(data)
				}
				if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			inUse, written, err := WriteDefaultForPodCIDRs(dir, d, tt.cidrs)
			if err != nil {
				t.Fatal(err)
			}
			if written != tt.wantWritten || filepath.Base(inUse) != tt.wantInUse {
				t.Errorf("in use %s, written %v; want %s, %v", inUse, written, tt.wantInUse, tt.wantWritten)
			}
			list, err := loadConfFile(filepath.Join(dir, own))
			switch {
			case tt.wantSubnet == "" && err == nil:
				t.Errorf("%s written", own)
			case tt.wantSubnet != "" && err != nil:
				t.Fatal(err)
			case tt.wantSubnet != "" && !strings.Contains(string(list.Bytes), `"`+tt.wantSubnet+`"`):
				t.Errorf("%s does not name %s:\n%s", own, tt.wantSubnet, list.Bytes)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(left) > 0 {
				t.Errorf("temp files left: %v", left)
			}
		})
	}
}

// TestDefaultFollowsPodCIDR: nothing is written at start, NetworkReady
// says why, and the pod CIDR makes the network (and rewrites it).
func TestDefaultFollowsPodCIDR(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "net.d")
	c, err := NewCNI(Config{ConfDir: dir, BinDirs: []string{cnitest.PluginDir(t)}, CacheDir: filepath.Join(t.TempDir(), "cache"),
		Default: &DefaultNetwork{Bridge: "cni0", FollowPodCIDR: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := confFiles(dir); len(files) != 0 {
		t.Fatalf("written before the pod CIDR: %v", files)
	}
	st := c.Status(ctx)
	if st.Ready || st.Reason != ReasonNotReady || !strings.Contains(st.Message, "pod CIDR") || !strings.Contains(st.Message, "UpdateRuntimeConfig") {
		t.Fatalf("Status before the pod CIDR = %+v", st)
	}
	if err := c.Ready(ctx); !errors.Is(err, ErrNoPodCIDR) || !errors.Is(err, ErrNoConfig) {
		t.Fatalf("Ready = %v, want ErrNoPodCIDR and ErrNoConfig", err)
	}
	for _, cidr := range []string{"10.244.1.0/24", "10.244.7.0/24"} {
		if err := c.SetPodCIDRs([]string{cidr}); err != nil {
			t.Fatal(err)
		}
		if st := c.Status(ctx); !st.Ready {
			t.Fatalf("Status after pod CIDR %s = %+v", cidr, st)
		}
		list, err := c.network()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(list.Bytes), `"`+cidr+`"`) {
			t.Errorf("network after pod CIDR %s:\n%s", cidr, list.Bytes)
		}
	}
	if err := c.SetPodCIDRs([]string{"10.244.1.0"}); !errors.Is(err, ErrInvalidPodCIDR) {
		t.Errorf("SetPodCIDRs of a bad CIDR = %v, want ErrInvalidPodCIDR", err)
	}
	// A conf dir that cannot be written is the node's fault, not the
	// caller's: the kubelet retries.
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	bad, err := NewCNI(Config{ConfDir: filepath.Join(notDir, "net.d"), CacheDir: t.TempDir(), Default: &DefaultNetwork{FollowPodCIDR: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.SetPodCIDRs([]string{"10.244.1.0/24"}); err == nil || errors.Is(err, ErrInvalidPodCIDR) {
		t.Errorf("SetPodCIDRs into an unwritable conf dir = %v, want an error that is not ErrInvalidPodCIDR", err)
	}
	if _, err := NewCNI(Config{ConfDir: dir, CacheDir: t.TempDir(), Default: &DefaultNetwork{FollowPodCIDR: true, Subnet: "10.1.0.0/16"}}, nil); err == nil {
		t.Error("a subnet and FollowPodCIDR accepted together")
	}
}
