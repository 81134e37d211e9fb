package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSync runs a command in a container and returns its output.
func (s *Server) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if s.containers == nil {
		return nil, errNoContainers
	}
	if len(req.GetCmd()) == 0 {
		return nil, invalidf("cmd is required")
	}
	if req.GetTimeout() < 0 {
		return nil, invalidf("timeout must not be negative")
	}
	res, err := s.containers.ExecSync(ctx, req.GetContainerId(), req.GetCmd(), seconds(req.GetTimeout()))
	if err != nil {
		return nil, rpcError(err)
	}
	stdout, stderr := fitExecOutput(res.Stdout, res.Stderr, maxMsgSize-maxExecOverhead)
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: res.ExitCode}, nil
}

// maxExecOverhead is what an ExecSyncResponse's framing and exit code
// take beyond its two outputs, generously.
const maxExecOverhead = 4 << 10

// fitExecOutput trims an exec's output to max bytes in all: each stream
// is capped on its own (16 MiB, the kubelet's cap), but the kubelet
// takes no CRI message over 16 MiB either, and an answer over that is
// an error instead of a probe's output (as CRI-O, the total is capped).
// The larger stream gives up bytes first; each keeps its beginning.
func fitExecOutput(stdout, stderr []byte, max int) ([]byte, []byte) {
	for len(stdout)+len(stderr) > max {
		over := len(stdout) + len(stderr) - max
		if len(stdout) >= len(stderr) {
			stdout = stdout[:len(stdout)-min(over, len(stdout)-len(stderr)+1)]
		} else {
			stderr = stderr[:len(stderr)-min(over, len(stderr)-len(stdout)+1)]
		}
	}
	return stdout, stderr
}
