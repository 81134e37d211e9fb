package container

import (
	"context"
	"errors"
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/monitor"
)

// MaxExecOutput caps each of an exec's stdout and stderr, as the kubelet
// does with what it receives.
const MaxExecOutput = 16 << 20

// ExecResult is ExecSync's answer.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int32
}

// ExecSync runs cmd in a running container and returns its output and exit
// code. A timeout kills the command and returns ErrTimeout.
func (s *Service) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (*ExecResult, error) {
	if len(cmd) == 0 {
		return nil, fmt.Errorf("%w: cmd: empty", ErrInvalid)
	}
	c, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	rec := c.snapshot()
	if rec.State != StateRunning || c.isExited() {
		return nil, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	// libcontainer moves the command into the container's cgroups once
	// the helper and its init have started: the RCU grace period that
	// first move would wait for passes meanwhile.
	cgprime.Prime()
	res, err := s.podProc(rec.PodID).ExecSync(ctx, rec.ID, cmd, timeout, MaxExecOutput)
	if err != nil {
		if monitor.IsCode(err, monitor.CodeNotRunning) {
			return nil, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		return nil, fmt.Errorf("container %s: exec: %w", rec.ID, err)
	}
	if res.TimedOut {
		return nil, fmt.Errorf("%w: container %s: command %q did not finish within %s", ErrTimeout, rec.ID, cmd[0], timeout)
	}
	return &ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: int32(res.Code)}, nil
}

// ReopenLog is ReopenContainerLog: the kubelet has renamed the log file
// and wants a new one at the same path.
func (s *Service) ReopenLog(ctx context.Context, id string) error {
	c, err := s.lookup(id)
	if err != nil {
		return err
	}
	rec := c.snapshot()
	if rec.State != StateRunning || c.isExited() {
		return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	if err := s.podProc(rec.PodID).ReopenLog(ctx, rec.ID); err != nil {
		return fmt.Errorf("container %s: reopen log: %w", rec.ID, err)
	}
	return nil
}

// resourcesUpdate is an UpdateContainerResources request for c as OCI
// resources, with c's record; c must not have exited.
func (s *Service) resourcesUpdate(c *ctr, r *runtimeapi.LinuxContainerResources) (Record, *specs.LinuxResources, error) {
	rec := c.snapshot()
	if c.isExited() {
		return rec, nil, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
	}
	oci := &specs.LinuxResources{}
	if err := spec.Resources(oci, r, s.host.CgroupV2(), "linux"); err != nil {
		return rec, nil, fmt.Errorf("%w: container %s: %w", ErrInvalid, rec.ID, err)
	}
	if !s.host.Hugetlb() {
		// As at create: the kubelet sends limits for every page size,
		// which a host without the controller cannot take.
		oci.HugepageLimits = nil
	}
	return rec, oci, nil
}

// UpdateResources is UpdateContainerResources: applied to the container's
// cgroup, then shown by Status.
func (s *Service) UpdateResources(ctx context.Context, id string, r *runtimeapi.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	c, err := s.lookup(id)
	if err != nil {
		return err
	}
	if s.opts.NRI.Enabled() {
		return s.nriUpdateResources(ctx, c, r)
	}
	c.op.Lock()
	defer c.op.Unlock()
	rec, oci, err := s.resourcesUpdate(c, r)
	if err != nil {
		return err
	}
	if err := s.podProc(rec.PodID).Update(ctx, rec.ID, rec.Dir, oci); err != nil {
		if monitor.IsCode(err, monitor.CodeNotRunning) {
			return fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		return fmt.Errorf("container %s: update resources: %w", rec.ID, err)
	}
	// oom_score_adj belongs to the process, set at start: keep the old one.
	next := proto.Clone(r).(*runtimeapi.LinuxContainerResources)
	if c.resources != nil {
		next.OomScoreAdj = c.resources.GetOomScoreAdj()
	}
	b, err := proto.Marshal(next)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.resources = next
	c.rec.Resources = b
	rec = c.rec
	c.mu.Unlock()
	if err := s.records.Put(rec.ID, &rec); err != nil {
		return errors.Join(fmt.Errorf("container %s: %w", rec.ID, err))
	}
	return nil
}
