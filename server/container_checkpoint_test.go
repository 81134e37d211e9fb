package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
)

// checkpointContainers records the timeout a checkpoint reaches the
// service with, and answers as the service does for an unknown id and
// where CRIU does not work.
type checkpointContainers struct {
	fuzzContainers
	timeout *time.Duration
}

func (c checkpointContainers) Checkpoint(_ context.Context, id, _ string, timeout time.Duration) error {
	*c.timeout = timeout
	if id == "nocriu" {
		return container.ErrCheckpointUnavailable
	}
	return c.found(id, container.ErrNotFound)
}

func TestCheckpointContainerRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     *runtimeapi.CheckpointContainerRequest
		code    codes.Code
		message string // a part of the answer's, or its whole with code Unknown
		timeout time.Duration
	}{
		{"fine", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "/ckpt.tar", Timeout: 30}, codes.OK, "", 30 * time.Second},
		{"default timeout", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "/ckpt.tar"}, codes.OK, "", 0},
		{"timeout beyond a Duration", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "/ckpt.tar", Timeout: 1 << 62}, codes.OK, "", maxCheckpointTimeout},
		{"no location", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID}, codes.InvalidArgument, "location: required", 0},
		{"relative location", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "ckpt.tar"}, codes.InvalidArgument, `location: "ckpt.tar"`, 0},
		{"negative timeout", &runtimeapi.CheckpointContainerRequest{ContainerId: fuzzLiveID, Location: "/ckpt.tar", Timeout: -1}, codes.InvalidArgument, "timeout", 0},
		{"unknown container", &runtimeapi.CheckpointContainerRequest{ContainerId: "gone", Location: "/ckpt.tar"}, codes.NotFound, "gone", 0},
		// The kubelet's e2e test skips on exactly this answer.
		{"no CRIU", &runtimeapi.CheckpointContainerRequest{ContainerId: "nocriu", Location: "/ckpt.tar"}, codes.Unknown, "checkpoint/restore support not available", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var timeout time.Duration
			s, _ := newTestServer(t, func(o *Options) {
				o.Containers = checkpointContainers{fuzzContainers{fuzzServices{t: t}}, &timeout}
			})
			_, err := s.CheckpointContainer(context.Background(), tc.req)
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.message) || (tc.code == codes.Unknown && st.Message() != tc.message) {
				t.Fatalf("CheckpointContainer: %v, want %s with %q", err, tc.code, tc.message)
			}
			if timeout != tc.timeout {
				t.Errorf("the service got timeout %v, want %v", timeout, tc.timeout)
			}
		})
	}
}
