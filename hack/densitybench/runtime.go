package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// daemon is the CRI runtime under test: berth or containerd, on roots
// under the run's work dir (volatile state on the run's tmpfs, as /run is
// on a node), the benchmark's CNI network, and registry mirrors for
// docker.io and registry.k8s.io to the local registry.
type daemon struct {
	name   string
	sock   string
	images []string // pulled before the kubelet starts (not timed)
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
}

func (d *daemon) endpoint() string { return "unix://" + d.sock }
func (d *daemon) pid() int         { return d.cmd.Process.Pid }

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

func berthDaemon(o *options, work string) (*daemon, []string, error) {
	d := &daemon{name: "berth", sock: filepath.Join(work, "run", "berth.sock"), images: []string{busybox}}
	cfg := fmt.Sprintf(`address = %q
root = %q
state = %q
[cni]
conf_dir = %q
bin_dirs = [%q]
`, d.sock, filepath.Join(work, "berth-root"), filepath.Join(work, "run", "berth-state"), filepath.Join(work, "net.d"), o.cniBinDir)
	for _, h := range []string{"docker.io", "registry.k8s.io"} {
		cfg += fmt.Sprintf("[registries.%q]\nmirrors = [\"http://%s\"]\n", h, o.registry)
	}
	p := filepath.Join(work, "berth.toml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		return nil, nil, err
	}
	return d, []string{o.berth, "--config", p}, nil
}

// containerdDaemon configures containerd as hack/bench-compare does: its
// defaults but for the roots, the mirrors (hosts.toml), the sandbox image
// (the test bed's pause, registry.k8s.io/pause:3.9), runc by path,
// cgroupfs, restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE here) and
// NRI off; netns pins under its state dir rather than /var/run/netns.
func containerdDaemon(o *options, work string) (*daemon, []string, error) {
	d := &daemon{name: "containerd", sock: filepath.Join(work, "run", "containerd.sock"), images: []string{busybox, pauseImage}}
	root, state := filepath.Join(work, "ctrd-root"), filepath.Join(work, "run", "ctrd-state")
	certs := filepath.Join(work, "certs.d")
	for _, h := range []string{"docker.io", "registry.k8s.io"} {
		if err := os.MkdirAll(filepath.Join(certs, h), 0o755); err != nil {
			return nil, nil, err
		}
		hosts := fmt.Sprintf("server = \"https://%s\"\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", h, o.registry)
		if err := os.WriteFile(filepath.Join(certs, h, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return nil, nil, err
		}
	}
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
imports = []
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[4]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[5]q
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[6]q
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
[plugins.'io.containerd.internal.v1.opt']
  path = %[9]q
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[10]q
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = %[11]q
`, root, state, d.sock, pauseImage, certs, o.runc, o.cniBinDir, filepath.Join(work, "net.d"),
		filepath.Join(root, "opt"), filepath.Join(work, "run", "s"), filepath.Join(root, "image-verifier"))
	p := filepath.Join(work, "containerd.toml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		return nil, nil, err
	}
	return d, []string{filepath.Join(o.containerdDir, "containerd"), "--config", p}, nil
}

// start runs the daemon (the shim is found on PATH) and waits for its CRI.
func (d *daemon) start(ctx context.Context, o *options, argv []string, work string) error {
	d.log = filepath.Join(o.out, d.name+".log")
	logf, err := os.Create(d.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.Env = append(os.Environ(), "PATH="+o.containerdDir+":"+os.Getenv("PATH"), "TMPDIR="+filepath.Join(work, "tmp"))
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.done = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.done) }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-d.done:
			return fmt.Errorf("%s exited during start-up (%v); its log: %s", d.name, d.cmd.ProcessState, d.log)
		default:
		}
		err := withCRI(ctx, d.endpoint(), func(ctx context.Context, rt runtimeapi.RuntimeServiceClient, _ runtimeapi.ImageServiceClient) error {
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not answering on %s: %w", d.name, d.sock, err)
		}
	}
}

// pull pulls the images the pods use, so that no pull is timed.
func (d *daemon) pull(ctx context.Context) error {
	return withCRI(ctx, d.endpoint(), func(ctx context.Context, _ runtimeapi.RuntimeServiceClient, im runtimeapi.ImageServiceClient) error {
		for _, ref := range d.images {
			if _, err := im.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
				return fmt.Errorf("%s: pull %s: %w", d.name, ref, err)
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
	if d.cmd == nil || d.done == nil {
		return 0
	}
	select {
	case <-d.done:
		log.Error("the runtime died during the run", "runtime", d.name, "state", d.cmd.ProcessState.String())
		return 1
	default:
	}
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
		log.Info("sandboxes the kubelet had not collected: removed", "runtime", d.name, "count", len(resp.Items))
		return nil
	})
	if err != nil {
		log.Error("LEAK: clean up the runtime's pods", "runtime", d.name, "error", err)
		leaks++
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		log.Error("the runtime did not stop in 30s: SIGKILL", "runtime", d.name)
		d.cmd.Process.Kill()
		<-d.done
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
