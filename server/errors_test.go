package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/internal/idindex"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/stats"
)

func TestRPCError(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("container x: %w", container.ErrNotFound), codes.NotFound},
		{fmt.Errorf("%w: linux.security_context.namespace_options.target_id: %w", container.ErrInvalid, fmt.Errorf("%w: container y", container.ErrNotFound)), codes.NotFound},
		{fmt.Errorf("%w: container x is not running", container.ErrState), codes.FailedPrecondition},
		{fmt.Errorf("%w: container x: the monitor of pod y is gone: %w", container.ErrState, context.DeadlineExceeded), codes.FailedPrecondition},
		{fmt.Errorf("container x: %w", container.ErrTimeout), codes.DeadlineExceeded},
		{fmt.Errorf("container x: %w", container.ErrNameReserved), codes.AlreadyExists},
		{fmt.Errorf("pod x: %w: protocol version 99", monitor.ErrVersion), codes.FailedPrecondition},
		{fmt.Errorf("container %w", &idindex.AmbiguousError{Prefix: "c", IDs: []string{"c1", "c2"}}), codes.InvalidArgument},
		{fmt.Errorf("%w: pod sandbox x", stats.ErrNotFound), codes.NotFound},
		{fmt.Errorf("container x: rootfs: %w", syscall.EDQUOT), codes.ResourceExhausted},
		{fmt.Errorf("container x: %w", context.Canceled), codes.Canceled},
		{errors.New("libcontainer: boom"), codes.Unknown},
	}
	for _, tt := range tests {
		err := rpcError(tt.err)
		if got := status.Code(err); got != tt.want || status.Convert(err).Message() != tt.err.Error() {
			t.Errorf("%v: %v, want %v with the message", tt.err, err, tt.want)
		}
	}
	if rpcError(nil) != nil {
		t.Error("rpcError(nil) is not nil")
	}
}

func TestCheckContainerConfig(t *testing.T) {
	named := &runtimeapi.ContainerMetadata{Name: "c"}
	image := &runtimeapi.ImageSpec{Image: "busybox"}
	tests := []struct {
		name string
		cfg  *runtimeapi.ContainerConfig
		want string // in the message; "" for none
	}{
		{"missing", nil, "config: missing"},
		{"no name", &runtimeapi.ContainerConfig{Image: image}, "config.metadata.name: missing"},
		{"no image", &runtimeapi.ContainerConfig{Metadata: named}, "config.image.image: missing"},
		{"empty image", &runtimeapi.ContainerConfig{Metadata: named, Image: &runtimeapi.ImageSpec{}}, "config.image.image: missing"},
		{"good", &runtimeapi.ContainerConfig{Metadata: named, Image: image}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkContainerConfig(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, container.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("= %v, want ErrInvalid naming %q", err, tt.want)
			}
			if code := status.Code(rpcError(err)); code != codes.InvalidArgument {
				t.Errorf("code %v", code)
			}
		})
	}
}
