package vmbed

import (
	"reflect"
	"strings"
	"testing"
)

// onHost sets hostArch to arch for the rest of the test, as on a host of
// that architecture.
func onHost(t *testing.T, arch string) {
	t.Helper()
	old := hostArch
	hostArch = arch
	t.Cleanup(func() { hostArch = old })
}

func TestLookupArch(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{"", "amd64", false},
		{"amd64", "amd64", false},
		{"arm64", "arm64", false},
		{"riscv64", "", true},
		{"aarch64", "", true}, // a GOARCH, not uname -m
	} {
		got, _, err := lookupArch(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("lookupArch(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestNames(t *testing.T) {
	key := "7d3d3e9153f0286a0123456789abcdef"
	for _, tc := range []struct {
		name, got, want string
	}{
		// amd64 keeps the names its cached pieces always had.
		{"rootfs amd64", rootfsName("bookworm", "amd64", key), "rootfs-bookworm-7d3d3e9153f0286a.tar"},
		{"rootfs arm64", rootfsName("bookworm", "arm64", key), "rootfs-bookworm-arm64-7d3d3e9153f0286a.tar"},
		{"image amd64", imageName("bookworm", "6.1", "amd64", nil), "image-bookworm-6.1"},
		{"image amd64 docker", imageName("bookworm", "6.1", "amd64", []string{"docker.io"}), "image-bookworm-6.1+docker.io"},
		{"image arm64", imageName("bookworm", "6.1", "arm64", nil), "image-bookworm-6.1-arm64"},
		{"image arm64 docker", imageName("bookworm", "6.12", "arm64", []string{"docker.io", "jq"}), "image-bookworm-6.12-arm64+docker.io+jq"},
		{"apt amd64", aptDir("/c", "trixie", "amd64"), "/c/apt-trixie"},
		{"apt arm64", aptDir("/c", "bookworm", "arm64"), "/c/apt-bookworm-arm64"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestIsImageOf(t *testing.T) {
	for _, tc := range []struct {
		dir, name string
		want      bool
	}{
		{"image-bookworm-6.1-40eb94f8bc72c2cf", "image-bookworm-6.1", true},
		// Another architecture's or variant's image is not an older one.
		{"image-bookworm-6.1-arm64-40eb94f8bc72c2cf", "image-bookworm-6.1", false},
		{"image-bookworm-6.1-arm64+docker.io-40eb94f8bc72c2cf", "image-bookworm-6.1", false},
		{"image-bookworm-6.1+docker.io-0432a5ee034247d0", "image-bookworm-6.1", false},
		{"image-bookworm-6.12-d4aba6230d5623a6", "image-bookworm-6.1", false},
		{"image-bookworm-6.1-arm64-40eb94f8bc72c2cf", "image-bookworm-6.1-arm64", true},
		{"image-bookworm-6.1-40eb94f8bc72c2cf.tmp", "image-bookworm-6.1", false},
		{"image-bookworm-6.1-40EB94F8BC72C2CF", "image-bookworm-6.1", false},
	} {
		if got := isImageOf(tc.dir, tc.name); got != tc.want {
			t.Errorf("isImageOf(%q, %q) = %v, want %v", tc.dir, tc.name, got, tc.want)
		}
	}
}

func TestKernelDep(t *testing.T) {
	depends := `linux-image-cloud-arm64
  Depends: linux-image-6.1.0-50-cloud-arm64
`
	for _, tc := range []struct {
		arch, want string
	}{
		{"arm64", "linux-image-6.1.0-50-cloud-arm64"},
		{"amd64", ""},
	} {
		m := kernelDep(tc.arch).FindStringSubmatch(depends)
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != tc.want {
			t.Errorf("kernelDep(%s): %q, want %q", tc.arch, got, tc.want)
		}
	}
}

func TestMachineArgs(t *testing.T) {
	tcg := []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
	tcgArm := []string{"-M", "virt", "-accel", "tcg,thread=multi", "-cpu", "max,pauth-impdef=on"}
	for _, tc := range []struct {
		arch, host string
		kvm        bool
		want       []string
	}{
		{"amd64", "amd64", true, []string{"-accel", "kvm", "-cpu", "host"}},
		{"amd64", "amd64", false, tcg},
		{"arm64", "amd64", true, tcgArm},
		{"arm64", "amd64", false, tcgArm},
		{"arm64", "arm64", true, []string{"-M", "virt", "-accel", "kvm", "-cpu", "host"}},
		{"amd64", "arm64", true, tcg},
	} {
		if got := machineArgs(tc.arch, tc.host, tc.kvm); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("machineArgs(%s on %s, kvm %v) = %q, want %q", tc.arch, tc.host, tc.kvm, got, tc.want)
		}
	}
}

func TestArchSpecs(t *testing.T) {
	for _, tc := range []struct {
		arch, qemu, console string
	}{
		{"amd64", "qemu-system-x86_64", "ttyS0"},
		{"arm64", "qemu-system-aarch64", "ttyAMA0"},
	} {
		a := archs[tc.arch]
		if a.qemu != tc.qemu || a.console != tc.console {
			t.Errorf("%s: qemu %q console %q, want %q %q", tc.arch, a.qemu, a.console, tc.qemu, tc.console)
		}
		if n := len(a.bootModules); n == 0 || a.bootModules[n-1] != "virtio_blk" {
			t.Errorf("%s: boot modules %q do not end with virtio_blk", tc.arch, a.bootModules)
		}
	}
}

func TestChrootCommand(t *testing.T) {
	onHost(t, "amd64")
	for _, tc := range []struct {
		name, arch, tool string
		env              []string
		want             string
	}{
		{"native", "amd64", "/o/foreignarch", nil, "chroot /r /usr/sbin/depmod -a"},
		{"foreign", "arm64", "/o/foreignarch", nil, "/o/foreignarch -arch arm64 -- chroot /r /usr/sbin/depmod -a"},
		{"foreign on PATH", "arm64", "", nil, "foreignarch -arch arm64 -- chroot /r /usr/sbin/depmod -a"},
		{"env", "arm64", "fa", []string{"container=lxc"}, "fa -arch arm64 -- env container=lxc chroot /r /usr/sbin/depmod -a"},
	} {
		got := strings.Join(chrootCommand(tc.arch, tc.tool, "/r", tc.env, "/usr/sbin/depmod", "-a"), " ")
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAptOptions(t *testing.T) {
	onHost(t, "amd64")
	for _, tc := range []struct {
		arch string
		want []string // besides the private directories
	}{
		{"amd64", nil},
		{"arm64", []string{"APT::Architecture=arm64", "APT::Architectures=arm64"}},
	} {
		var got []string
		for _, o := range aptOptions("/c/apt", tc.arch) {
			if strings.HasPrefix(o, "APT::Architecture") {
				got = append(got, o)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("aptOptions(%s): %q, want %q", tc.arch, got, tc.want)
		}
	}
}
