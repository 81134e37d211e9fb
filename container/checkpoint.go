package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// CheckpointTimeout bounds a CheckpointContainer whose request gives no
// timeout: the kubelet's runtime request timeout is 2m, a dump of a large
// memory image may take longer.
const CheckpointTimeout = 4 * time.Minute

// ErrCheckpointUnavailable answers a checkpoint on a host where CRIU does
// not work. Its text is the whole message on purpose: the kubelet's
// checkpoint e2e test skips on exactly "(rpc error: code = Unknown desc =
// checkpoint/restore support not available)", so the reason (CRIU
// missing, or what "criu check" said) is logged, not appended. No class:
// gRPC Unknown, as CRI-O answers.
var ErrCheckpointUnavailable = errors.New("checkpoint/restore support not available")

// criuProbe is the host's answer to "does CRIU work here", kept once
// given: a kernel that CRIU cannot handle does not start working
// meanwhile. A check that ran out of time is no answer and is asked
// again next time.
type criuProbe struct {
	mu       sync.Mutex
	answered bool
	reason   string // why not; empty when it works
}

// criuCheckTimeout bounds "criu check": ~1 s on a host, past 30 s in an
// emulated VM while a kubelet starts pods beside it.
const criuCheckTimeout = 2 * time.Minute

// unavailable tells why checkpoints cannot work here, empty if they can.
func (p *criuProbe) unavailable() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.answered {
		var timedOut bool
		p.reason, timedOut = probeCRIU(criuCheckTimeout)
		p.answered = !timedOut
	}
	return p.reason
}

// probeCRIU runs "criu check", which tries the kernel features a dump and
// a restore need; the last error line it prints is the reason.
func probeCRIU(timeout time.Duration) (reason string, timedOut bool) {
	bin, err := exec.LookPath("criu")
	if err != nil {
		return "criu not found on PATH", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check").CombinedOutput()
	if err == nil {
		return "", false
	}
	if ctx.Err() != nil {
		return fmt.Sprintf("%s check: no answer in %s", bin, timeout), true
	}
	reason = err.Error()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			reason = l
		}
	}
	return fmt.Sprintf("%s check: %s", bin, reason), false
}

// checkLocation validates CheckpointContainer's location: an absolute
// path of a file to be, in an existing directory.
func checkLocation(location string) error {
	switch {
	case location == "":
		return fmt.Errorf("%w: location: required", ErrInvalid)
	case !filepath.IsAbs(location):
		return fmt.Errorf("%w: location: %q is not an absolute path", ErrInvalid, location)
	case strings.HasSuffix(location, "/"):
		return fmt.Errorf("%w: location: %q names a directory, not an archive file", ErrInvalid, location)
	}
	if fi, err := os.Stat(location); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: location: %q is a directory, not an archive file", ErrInvalid, location)
	}
	dir := filepath.Dir(location)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: location: directory %q does not exist", ErrInvalid, dir)
	}
	return nil
}

// Checkpoint is CheckpointContainer: the running container's processes
// dumped by CRIU, left running, with its spec, its description and the
// changes of its writable layer, in an uncompressed tar at location
// (archive.go tells the layout). A host without a working CRIU answers
// ErrCheckpointUnavailable before anything is written.
func (s *Service) Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error {
	if err := checkLocation(location); err != nil {
		return err
	}
	c, err := s.lookup(id)
	if err != nil {
		return err
	}
	// Not at the same time as a remove or a resources update.
	c.op.Lock()
	defer c.op.Unlock()
	rec := c.snapshot()
	if rec.State != StateRunning || c.isExited() {
		return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	// The first checkpoint asks CRIU whether it works here: ~1 s on a
	// host, 30-40 s in an emulated VM. The log says which part took long.
	start := time.Now()
	if why := s.criu.unavailable(); why != "" {
		s.log.Warn("checkpoint refused: CRIU does not work on this host", "container", rec.ID, "reason", why)
		return ErrCheckpointUnavailable
	}
	checked := time.Now()
	if timeout <= 0 {
		timeout = CheckpointTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Frozen from before the dump until its writable layer is read: a
	// file the container rewrites meanwhile would change under the tar
	// writer, and the layer would not be the memory's.
	thaw, err := s.freeze(ctx, []Record{rec})
	defer thaw()
	if err != nil {
		return fmt.Errorf("container %s: checkpoint: %w", rec.ID, err)
	}
	// Without tcp-established, as CRI-O's container checkpoint: this is
	// the kubelet's forensic copy of one container, which runs on. The
	// peer of any connection it holds is outside the dump and goes on
	// talking to the original, so a restored copy could never carry the
	// connection on (the peer resets it), and a copy restored while the
	// original runs would send the original's segments, from its
	// address, into the live connection. A container holding an
	// established connection fails to dump, CRIU's error in the answer;
	// CheckpointPod dumps connections, both ends of those inside the
	// pod being in its cut.
	if err := s.checkpointTo(ctx, c, &rec, location, false); err != nil {
		return err
	}
	s.log.Info("container checkpointed", "container", rec.ID, "location", location,
		"criu_check", checked.Sub(start).Round(time.Millisecond), "dump", time.Since(checked).Round(time.Millisecond))
	return nil
}

// checkpointTo dumps the container in a work directory under berth's
// root and writes its archive at location; tcp dumps its established
// TCP connections (CRIU's tcp-established), and config.dump says so.
func (s *Service) checkpointTo(ctx context.Context, c *ctr, rec *Record, location string, tcp bool) error {
	work, err := os.MkdirTemp(s.checkpoints, rec.ID+"-")
	if err != nil {
		return fmt.Errorf("container %s: checkpoint: %w", rec.ID, err)
	}
	// work is the directory MkdirTemp just made under berth's root.
	defer os.RemoveAll(work)
	if err := s.dump(ctx, rec, work, tcp); err != nil {
		return err
	}
	if err := s.writeCheckpoint(c, rec, work, location, tcp); err != nil {
		return fmt.Errorf("container %s: checkpoint: %w", rec.ID, err)
	}
	return nil
}

// writeCheckpoint adds the spec, the description and the writable
// layer's changes to CRIU's dump in work and writes the archive.
func (s *Service) writeCheckpoint(c *ctr, rec *Record, work, location string, tcp bool) error {
	c.mu.RLock()
	spec, cfg := c.spec, c.cfg
	c.mu.RUnlock()
	if len(spec) == 0 {
		var err error
		if spec, err = os.ReadFile(filepath.Join(rec.Dir, monitor.SpecFile)); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
	}
	desc, err := json.MarshalIndent(describe(rec, cfg, time.Now(), tcp), "", "  ")
	if err != nil {
		return err
	}
	if err := writeRootfsDiff(rec.Upper, work); err != nil {
		return fmt.Errorf("rootfs diff: %w", err)
	}
	return writeArchive(location, work, map[string][]byte{specDump: spec, configDump: desc})
}

// dump has the spawn helper, run by berth (CRIU needs no parent of the
// container's, and a pod's process knows nothing of checkpoints), dump
// the container into work/checkpoint, CRIU's log into work/dump.log.
func (s *Service) dump(ctx context.Context, rec *Record, work string, tcp bool) error {
	bin, err := s.opts.PodProcesses.SpawnBinary()
	if err != nil {
		return fmt.Errorf("container %s: checkpoint: %w", rec.ID, err)
	}
	err = monitor.RunSpawn(ctx, bin, dumpRequest(s.runc, rec.ID, work, tcp))
	if err == nil {
		return nil
	}
	if tail := logTail(filepath.Join(work, dumpLog)); tail != "" {
		err = fmt.Errorf("%w (%s: %s)", err, dumpLog, tail)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: container %s: checkpoint: %w", ErrTimeout, rec.ID, err)
	}
	return fmt.Errorf("container %s: checkpoint: %w", rec.ID, err)
}

// dumpRequest is the spawn helper's request to dump container id (of
// libcontainer's root runc) into work.
func dumpRequest(runc, id, work string, tcp bool) *monitor.SpawnRequest {
	return &monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, Root: runc, ID: id,
		ImagesDir: filepath.Join(work, checkpointDir), WorkDir: work, TCPEstablished: tcp}
}

// logTail is what CRIU's log says of why a dump or a restore failed: its
// first error line, which names the cause (a connected TCP socket
// "consider using --tcp-established option"), and its last when another
// follows (the step that failed: "Dumping FAILED").
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var first, last string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "Error") {
			last = strings.TrimSpace(l)
			if first == "" {
				first = last
			}
		}
	}
	if last != first {
		return first + " ... " + last
	}
	return first
}

// sweepCheckpoints removes the work directories of checkpoints that a
// berth killed mid-dump left behind: a checkpoint is one synchronous RPC,
// so none is under way while the service starts.
func (s *Service) sweepCheckpoints() {
	entries, err := os.ReadDir(s.checkpoints)
	if err != nil {
		s.log.Warn("cannot list checkpoint work directories", "dir", s.checkpoints, "error", err)
		return
	}
	for _, e := range entries {
		// Only entries of s.checkpoints, the directory berth made for them.
		dir := filepath.Join(s.checkpoints, e.Name())
		if err := os.RemoveAll(dir); err != nil {
			s.log.Warn("cannot remove a stale checkpoint work directory", "dir", dir, "error", err)
			continue
		}
		s.log.Info("removed a stale checkpoint work directory", "dir", dir)
	}
}
