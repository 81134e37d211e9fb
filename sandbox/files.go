package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The per-pod files containers of the pod get bind-mounted.
const (
	hostnameFile = "hostname"
	hostsFile    = "hosts"
	resolvFile   = "resolv.conf"
	shmDir       = "shm"
	// shmSize is what Docker and containerd give a pod's /dev/shm.
	shmSize = 64 << 20
)

// podFiles are where a pod's hostname, hosts, resolv.conf and /dev/shm
// live, under the pod's state directory.
type podFiles struct{ dir string }

func (f podFiles) Hostname() string { return filepath.Join(f.dir, hostnameFile) }
func (f podFiles) Hosts() string    { return filepath.Join(f.dir, hostsFile) }
func (f podFiles) Resolv() string   { return filepath.Join(f.dir, resolvFile) }
func (f podFiles) Shm() string      { return filepath.Join(f.dir, shmDir) }

// hostSource lets tests replace the host files that host-network pods and
// pods without a DNS config copy.
type hostSource struct {
	Hosts, Resolv string
}

var defaultHostSource = hostSource{Hosts: "/etc/hosts", Resolv: "/etc/resolv.conf"}

// write creates the directory and the files. ip may be nil when the pod
// has no address (host network) or is not known yet.
func (f podFiles) write(src hostSource, hostname string, hostNetwork bool, dns *runtimeapi.DNSConfig, ip net.IP) error {
	if err := os.MkdirAll(f.dir, 0o711); err != nil {
		return err
	}
	if err := writeFile(f.Hostname(), []byte(hostname+"\n")); err != nil {
		return err
	}
	if hostNetwork {
		if err := copyFile(src.Hosts, f.Hosts()); err != nil {
			return err
		}
	} else if err := writeFile(f.Hosts(), hostsContent(hostname, ip)); err != nil {
		return err
	}
	if dns != nil && (len(dns.Servers) > 0 || len(dns.Searches) > 0 || len(dns.Options) > 0) {
		return writeFile(f.Resolv(), resolvContent(dns))
	}
	return copyFile(src.Resolv, f.Resolv())
}

func hostsContent(hostname string, ip net.IP) []byte {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	if ip != nil && hostname != "" {
		fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
	}
	return []byte(b.String())
}

func resolvContent(dns *runtimeapi.DNSConfig) []byte {
	var b strings.Builder
	if len(dns.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(dns.Searches, " "))
	}
	for _, s := range dns.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(dns.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(b.String())
}

func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		data = nil
	} else if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	return writeFile(dst, data)
}

// mountShm gives the pod a private tmpfs for /dev/shm.
func (f podFiles) mountShm() error {
	if err := os.MkdirAll(f.Shm(), 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=1777,size=%d", shmSize)
	if err := unix.Mount("shm", f.Shm(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount pod shm %s: %w", f.Shm(), err)
	}
	return nil
}

// unmountShm is idempotent.
func (f podFiles) unmountShm() error {
	for range 16 {
		err := unix.Unmount(f.Shm(), unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("unmount pod shm %s: %w", f.Shm(), err)
	}
	return fmt.Errorf("unmount pod shm %s: still mounted after 16 unmounts", f.Shm())
}

// remove unmounts shm and deletes the directory. The unmount comes first:
// RemoveAll would empty a still-mounted tmpfs, then fail on its mount point.
func (f podFiles) remove() error {
	if err := f.unmountShm(); err != nil {
		return err
	}
	if err := os.RemoveAll(f.dir); err != nil {
		return fmt.Errorf("remove pod dir %s: %w", f.dir, err)
	}
	return nil
}
