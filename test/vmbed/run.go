package vmbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Inits are the machine's PID 1 variants: systemd, or a shell that mounts
// the unified hierarchy and runs the job (berth's cgroupfs driver on v2
// without systemd).
var Inits = map[string]string{
	"systemd": "/sbin/init",
	"plain":   "/usr/local/sbin/berth-vm-plain-init",
}

// RunConfig is one boot of an image.
type RunConfig struct {
	Image  *Image
	Init   string   // a key of Inits
	CPUs   int      // vCPUs
	MemMiB int      // memory
	Append string   // extra kernel command line (hugepages=, psi=1, ...)
	In     []string // host files and directories copied to /job/in
	Out    string   // host directory that receives /job/out, if set
	Cmd    []string // run in /job/in as root; one argument is a shell script
	NoSwap bool
	// Reboot lets the job reboot the machine: a job that exits with
	// RebootCode is run again after a reboot, finding /job as it left
	// it (the root disk's changes last as long as the run).
	Reboot bool
	// RootGiB, when larger than the image's root disk (8 GiB), boots a
	// root disk of that size: the job grows the file system itself
	// (resize2fs /dev/vda), since the image's file system must not change.
	RootGiB int
	// Disks are raw disk images attached read-write after the job disk
	// (/dev/vdc, /dev/vdd, ...): state a job keeps between runs.
	Disks   []string
	Stdout  io.Writer // the job's output, live
	Console io.Writer // the machine's console (kernel, systemd), if set
	Log     *slog.Logger
	TmpDir  string
}

// RebootCode is the exit code by which a job asks for a reboot (EX_TEMPFAIL).
const RebootCode = 75

// Run boots a pristine copy of the image, runs the command, powers off and
// returns the command's exit code. An error means the machine did not
// run the command to its end (it did not boot, or ctx ended first).
func Run(ctx context.Context, cfg RunConfig) (int, error) {
	init, ok := Inits[cfg.Init]
	if !ok {
		return -1, fmt.Errorf("unknown init %q (want systemd or plain)", cfg.Init)
	}
	work, err := os.MkdirTemp(cfg.TmpDir, "berth-vm-")
	if err != nil {
		return -1, err
	}
	defer os.RemoveAll(work)
	job := filepath.Join(work, "job.ext4")
	if err := jobDisk(ctx, cfg, work, job); err != nil {
		return -1, fmt.Errorf("job disk: %w", err)
	}
	start := time.Now()
	bootErr := boot(ctx, cfg, work, job, init)
	cfg.Log.Info("machine powered off", "after", time.Since(start).Round(100*time.Millisecond), "error", bootErr)
	// What the job left is copied out even when the machine was stopped
	// (a timeout): its logs say where it hung.
	outErr := keepOutput(cfg, job, work)
	if bootErr != nil {
		return -1, bootErr
	}
	rc, err := jobExitCode(context.Background(), job)
	if err != nil {
		return -1, err
	}
	return rc, outErr
}

// keepOutput copies the job's whole output (also where the serial port
// lost its last bytes) and its /job/out into cfg.Out.
func keepOutput(cfg RunConfig, job, work string) error {
	if cfg.Out == "" {
		return nil
	}
	ctx := context.Background() // the run's may be over: this is the cleanup
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	debugfs(ctx, job, "dump /job.log "+filepath.Join(cfg.Out, "job.log"), nil)
	if err := copyOut(ctx, job, work, cfg.Out); err != nil {
		return fmt.Errorf("copying /job/out to %s: %w", cfg.Out, err)
	}
	return nil
}

// jobDisk writes the job disk: the command as /run, the inputs under /in,
// an empty /out, with room for what the job writes.
func jobDisk(ctx context.Context, cfg RunConfig, work, disk string) error {
	stage := filepath.Join(work, "job")
	for _, d := range []string{"in", "out"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "run"), []byte(script(cfg.Cmd)), 0o755); err != nil {
		return err
	}
	// Markers the guest's job runner reads.
	for name, on := range map[string]bool{"no-swap": cfg.NoSwap, "reboot": cfg.Reboot} {
		if !on {
			continue
		}
		if err := os.WriteFile(filepath.Join(stage, name), nil, 0o644); err != nil {
			return err
		}
	}
	for _, in := range cfg.In {
		if err := run(ctx, cfg.Log, "cp", "-a", in, filepath.Join(stage, "in")); err != nil {
			return err
		}
	}
	size, err := treeSize(stage)
	if err != nil {
		return err
	}
	// Room for the job's results; the file is sparse, so only what is
	// written takes space on the host.
	mib := size/(1<<20)*5/4 + 2048
	return run(ctx, cfg.Log, "mkfs.ext4", "-q", "-F", "-L", "berth-vm-job", "-d", stage, disk, strconv.FormatInt(mib, 10)+"M")
}

// script turns the command into /job/run: one argument is a script of its
// own, several are one command, quoted.
func script(cmd []string) string {
	if len(cmd) == 1 {
		return "#!/bin/bash\n" + cmd[0] + "\n"
	}
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return "#!/bin/bash\nexec " + strings.Join(q, " ") + "\n"
}

func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// boot runs QEMU until the machine powers off, copying the job's serial
// port to cfg.Stdout as it is written.
func boot(ctx context.Context, cfg RunConfig, work, job, init string) error {
	port := filepath.Join(work, "job.out")
	console := filepath.Join(work, "console.log")
	drive, err := rootDrive(ctx, cfg, work)
	if err != nil {
		return err
	}
	arch, spec, err := lookupArch(cfg.Image.Arch)
	if err != nil {
		return err
	}
	args := machineArgs(arch, hostArch, kvm())
	if !cfg.Reboot {
		// A reboot (a panic's, too: panic=-1) ends the run.
		args = append(args, "-no-reboot")
	}
	args = append(args,
		"-smp", strconv.Itoa(cfg.CPUs), "-m", strconv.Itoa(cfg.MemMiB),
		"-nodefaults", "-nic", "none", "-display", "none",
		"-kernel", cfg.Image.Kernel, "-initrd", cfg.Image.Initrd,
		"-append", "console="+spec.console+" loglevel=4 panic=-1 systemd.unified_cgroup_hierarchy=1 systemd.show_status=0 berth.init="+init+" "+cfg.Append,
		"-drive", drive,
		"-drive", "file="+job+",format=raw,if=virtio",
		"-device", "virtio-rng-pci",
		"-device", "virtio-serial-pci",
		"-chardev", "file,id=job,path="+port,
		"-device", "virtserialport,chardev=job,name=job",
		"-serial", "file:"+console,
	)
	for _, d := range cfg.Disks {
		args = append(args, "-drive", "file="+d+",format=raw,if=virtio")
	}
	qemu := exec.CommandContext(ctx, spec.qemu, args...)
	// The root disk's snapshot overlay goes where TMPDIR says: the run's
	// work directory, removed with it.
	qemu.Env = append(os.Environ(), "TMPDIR="+work)
	var stderr bytes.Buffer
	qemu.Stderr = &stderr
	if err := qemu.Start(); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- qemu.Wait() }()
	follow(port, cfg.Stdout, console, cfg.Console, done, &err)
	if err != nil {
		tail, _ := os.ReadFile(console)
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (console's last lines:\n%s)", ctx.Err(), tail)
		} else {
			err = fmt.Errorf("qemu: %w: %s (console's last lines:\n%s)", err, stderr.String(), tail)
		}
	}
	return err
}

// rootDrive returns QEMU's -drive for the root: the image booted with
// snapshot=on, or, for a larger disk, a sparse qcow2 overlay of that size
// in the run's work directory with the image as its read-only backing file.
func rootDrive(ctx context.Context, cfg RunConfig, work string) (string, error) {
	if cfg.RootGiB <= 8 {
		return "file=" + cfg.Image.Root + ",format=raw,if=virtio,snapshot=on", nil
	}
	overlay := filepath.Join(work, "root.qcow2")
	if err := run(ctx, cfg.Log, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", cfg.Image.Root,
		overlay, strconv.Itoa(cfg.RootGiB)+"G"); err != nil {
		return "", fmt.Errorf("root disk overlay: %w", err)
	}
	return "file=" + overlay + ",format=qcow2,if=virtio", nil
}

// follow copies the growing files to their writers until QEMU exits.
func follow(port string, w io.Writer, console string, cw io.Writer, done <-chan error, err *error) {
	var off, coff int64
	for {
		select {
		case *err = <-done:
			off = copyFrom(port, off, w)
			copyFrom(console, coff, cw)
			return
		case <-time.After(200 * time.Millisecond):
			off = copyFrom(port, off, w)
			coff = copyFrom(console, coff, cw)
		}
	}
}

func copyFrom(path string, off int64, w io.Writer) int64 {
	if w == nil {
		return off
	}
	f, err := os.Open(path)
	if err != nil {
		return off
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off
	}
	n, _ := io.Copy(w, f)
	return off + n
}

// kvm says whether the host has working hardware virtualization, where
// machines of its own architecture use KVM (machineArgs), and QEMU's TCG
// elsewhere. /dev/kvm alone is not enough: this development machine
// registers one (PVM) without vmx/svm, and a stock guest kernel hangs on it
// at once.
func kvm() bool {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	hw := bytes.Contains(cpuinfo, []byte(" vmx")) || bytes.Contains(cpuinfo, []byte(" svm"))
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil && hw {
		f.Close()
		return true
	}
	return false
}

// jobExitCode reads /rc from the job disk, which the machine wrote last.
func jobExitCode(ctx context.Context, job string) (int, error) {
	var out bytes.Buffer
	if err := debugfs(ctx, job, "cat /rc", &out); err != nil {
		return -1, err
	}
	s := strings.TrimSpace(out.String())
	rc, err := strconv.Atoi(s)
	if err != nil {
		return -1, errors.New("the job did not finish: the machine wrote no exit code")
	}
	return rc, nil
}

// copyOut copies what the job left in /job/out into dst.
func copyOut(ctx context.Context, job, work, dst string) error {
	if err := debugfs(ctx, job, "rdump /out "+work, nil); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(work, "out"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		to := filepath.Join(dst, e.Name())
		os.RemoveAll(to)
		if err := os.Rename(filepath.Join(work, "out", e.Name()), to); err != nil {
			return err
		}
	}
	return nil
}

func debugfs(ctx context.Context, disk, request string, out io.Writer) error {
	c := exec.CommandContext(ctx, "debugfs", "-R", request, disk)
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = out, &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("debugfs %q: %w: %s", request, err, stderr.String())
	}
	return nil
}
