package kubehost

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// Standalone is where a stock kubelet without an API server runs: static
// pods from a directory, its server on the node IP.
type Standalone struct {
	Endpoint      string // the runtime's CRI endpoint, "unix://..."
	CgroupRoot    string // under the cgroupfs driver
	StaticPodPath string
	// Address is the node IP the kubelet serves on; the kubelet refuses a
	// loopback one.
	Address           string
	Port, HealthzPort int
	PodLogsDir        string
	VolumePluginDir   string
}

// Config is the KubeletConfiguration, as JSON's map, that test/kubelet
// and bench/density start from: cgroup v1 allowed and swap tolerated
// (the reference host has both), manifests polled every second, anonymous
// AlwaysAllow access to the server (the harnesses read /pods), healthz on
// loopback, and neither evictions nor image GC on a shared machine.
// Callers add their own keys.
func (s Standalone) Config() map[string]any {
	return map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"containerRuntimeEndpoint": s.Endpoint,
		"imageServiceEndpoint":     s.Endpoint,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               s.CgroupRoot,
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"staticPodPath":            s.StaticPodPath,
		"fileCheckFrequency":       "1s",
		"address":                  s.Address,
		"port":                     s.Port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              s.HealthzPort,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":   map[string]any{"mode": "AlwaysAllow"},
		"podLogsDir":      s.PodLogsDir,
		"volumePluginDir": s.VolumePluginDir,
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
			"nodefs.inodesFree": "1%", "imagefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"runtimeRequestTimeout":       "2m",
	}
}

// URL is path on the kubelet's server.
func (s Standalone) URL(path string) string {
	return "https://" + net.JoinHostPort(s.Address, strconv.Itoa(s.Port)) + path
}

// Get reads path from the kubelet's server with c (which accepts its
// self-signed certificate); a status other than 200 is an error carrying
// the body.
func (s Standalone) Get(c *http.Client, path string) ([]byte, error) {
	resp, err := c.Get(s.URL(path))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b, nil
}

// Pods reads the kubelet's /pods with c into the caller's type of pod,
// which holds what it reads of a v1.Pod.
func Pods[P any](s Standalone, c *http.Client) ([]P, error) {
	b, err := s.Get(c, "/pods")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []P `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode /pods: %w", err)
	}
	return list.Items, nil
}
