package density

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-runtime/berth/test/runtimeharness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// daemon is the CRI runtime under test: berth or containerd, on roots
// under the run's work dir (volatile state on the run's tmpfs, as /run is
// on a node), the benchmark's CNI network, and registry mirrors for
// docker.io and registry.k8s.io to the local registry.
type daemon struct {
	images []string // pulled before the kubelet starts (not timed)
	runtimeharness.Daemon
}

func (d *daemon) endpoint() string { return d.Endpoint }
func (d *daemon) pid() int         { return d.Pid() }

// writeCNI writes the network both runtimes use: a bridge with
// host-local on a /22, no masquerade (nothing leaves the host), as
// hack/bench-compare's plain chain.
func writeCNI(dir, ipam string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "bdens",
  "plugins": [
    {
      "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
    }
  ]
}
`, podBridge, podSubnet, ipam)
	return os.WriteFile(filepath.Join(dir, "10-bdens.conflist"), []byte(conf), 0o644)
}

// mirrored are the registries the pods' images name.
var mirrored = []string{"docker.io", "registry.k8s.io"}

func berthDaemon(o *options, work string) (*daemon, error) {
	sock := filepath.Join(work, "run", "berth.sock")
	cfg := runtimeharness.BerthConfig{
		Socket: sock, Root: filepath.Join(work, "berth-root"), State: filepath.Join(work, "run", "berth-state"),
		CNIConfDir: filepath.Join(work, "net.d"), CNIBinDir: o.cniBinDir, Registry: o.registry, Mirrored: mirrored,
	}
	p := filepath.Join(work, "berth.toml")
	if err := runtimeharness.WriteConfig(p, []byte(cfg.TOML())); err != nil {
		return nil, err
	}
	return newDaemon(o, work, "berth", sock, []string{o.berth, "--config", p}, busybox), nil
}

// containerdDaemon configures containerd as hack/bench-compare does: its
// defaults but for the roots, the mirrors (hosts.toml), the sandbox image
// (the test bed's pause, registry.k8s.io/pause:3.9), runc by path,
// cgroupfs, restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE here) and
// NRI off; netns pins under its state dir rather than /var/run/netns.
func containerdDaemon(o *options, work string) (*daemon, error) {
	sock := filepath.Join(work, "run", "containerd.sock")
	root := filepath.Join(work, "ctrd-root")
	certs := filepath.Join(work, "certs.d")
	if err := runtimeharness.WriteHostsTOML(certs, o.registry, mirrored); err != nil {
		return nil, err
	}
	cfg := runtimeharness.ContainerdConfig{
		Root: root, State: filepath.Join(work, "run", "ctrd-state"), Socket: sock,
		SandboxImage: pauseImage, CertsDir: certs, Runc: o.runc, RestrictOOMScoreAdj: true, NetnsUnderState: true,
		CNIBinDir: o.cniBinDir, CNIConfDir: filepath.Join(work, "net.d"), OptDir: filepath.Join(root, "opt"),
		ShimSocketDir: filepath.Join(work, "run", "s"), ImageVerifierDir: filepath.Join(root, "image-verifier"),
	}
	p := filepath.Join(work, "containerd.toml")
	if err := runtimeharness.WriteConfig(p, []byte(cfg.TOML())); err != nil {
		return nil, err
	}
	return newDaemon(o, work, "containerd", sock, []string{filepath.Join(o.containerdDir, "containerd"), "--config", p}, busybox, pauseImage), nil
}

// newDaemon is a runtime logging to the report directory, with
// containerd's directory first on PATH (its shim is found there).
func newDaemon(o *options, work, name, sock string, argv []string, images ...string) *daemon {
	return &daemon{images: images, Daemon: runtimeharness.Daemon{
		Name: name, Argv: argv, Env: []string{"PATH=" + o.containerdDir + ":" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(work, "tmp")},
		Endpoint: "unix://" + sock, LogPath: filepath.Join(o.out, name+".log"), ReadyIn: 60 * time.Second, OwnGroup: true,
	}}
}

// pull pulls the images the pods use, so that no pull is timed.
func (d *daemon) pull(ctx context.Context) error {
	return withCRI(ctx, d.endpoint(), func(ctx context.Context, _ runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient) error {
		for _, ref := range d.images {
			if _, err := im.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
				return fmt.Errorf("%s: pull %s: %w", d.Name, ref, err)
			}
		}
		return nil
	})
}

// counts returns the ready sandboxes and running containers the runtime lists.
func (d *daemon) counts(ctx context.Context) (ready, running, sandboxes int, err error) {
	err = withCRI(ctx, d.endpoint(), func(ctx context.Context, rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		ps, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		sandboxes = len(ps.Items)
		for _, p := range ps.Items {
			if p.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				ready++
			}
		}
		for _, c := range cs.Containers {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				running++
			}
		}
		return nil
	})
	return
}

// containerStarts maps each pod's uid (the kubelet's label) to when the
// runtime started its container, to the nanosecond.
func (d *daemon) containerStarts(ctx context.Context) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := withCRI(ctx, d.endpoint(), func(ctx context.Context, rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		for _, c := range cs.Containers {
			st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if err != nil {
				return fmt.Errorf("container %s: %w", c.Id, err)
			}
			if st.Status.StartedAt > 0 {
				out[c.Labels["io.kubernetes.pod.uid"]] = time.Unix(0, st.Status.StartedAt)
			}
		}
		return nil
	})
	return out, err
}

// stop removes the sandboxes the kubelet left (it removes those of deleted
// pods only in its periodic garbage collection: not leaks), then stops the
// daemon. A removal that fails is a leak.
func (d *daemon) stop(log *slog.Logger) int {
	return d.Stop(log, 30*time.Second, func(endpoint string) int { return d.removeSandboxes(log) })
}

func (d *daemon) removeSandboxes(log *slog.Logger) int {
	leaks := 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := withCRI(ctx, d.endpoint(), func(ctx context.Context, rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
		resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, p := range resp.Items {
			if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				log.Error("LEAK: stop pod sandbox", "id", p.Id, "error", err)
				leaks++
				continue
			}
			if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				log.Error("LEAK: remove pod sandbox", "id", p.Id, "error", err)
				leaks++
			}
		}
		log.Info("sandboxes the kubelet had not collected: removed", "runtime", d.Name, "count", len(resp.Items))
		return nil
	})
	if err != nil {
		log.Error("LEAK: clean up the runtime's pods", "runtime", d.Name, "error", err)
		leaks++
	}
	return leaks
}

func withCRI(ctx context.Context, endpoint string, f func(context.Context, runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) error) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return f(ctx, runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn))
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
