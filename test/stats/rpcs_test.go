package stats_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// notYet are the RPCs berth does not implement: none since CheckpointPod
// and RestorePod.
var notYet = map[string]bool{}

// TestEveryRPCAnswers calls every RPC of both CRI services, as the API
// describes them, with an empty request: each must answer something other
// than Unimplemented (an empty request is often invalid, which is fine).
func TestEveryRPCAnswers(t *testing.T) {
	framework.RequireRoot(t)
	d := framework.StartDaemon(t)
	services := runtimeapi.File_staging_src_k8s_io_cri_api_pkg_apis_runtime_v1_api_proto.Services()
	n := 0
	for i := range services.Len() {
		svc := services.Get(i)
		methods := svc.Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			name := string(m.Name())
			n++
			t.Run(string(svc.Name())+"/"+name, func(t *testing.T) {
				full := fmt.Sprintf("/%s/%s", svc.FullName(), name)
				req, resp := dynamicpb.NewMessage(m.Input()), dynamicpb.NewMessage(m.Output())
				// Streams that never end on their own (events) are cut short.
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				var err error
				if m.IsStreamingServer() {
					var s grpc.ClientStream
					s, err = d.Conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, full)
					if err == nil {
						if err = s.SendMsg(req); err == nil {
							s.CloseSend()
							for err == nil {
								err = s.RecvMsg(resp)
							}
						}
					}
					if errors.Is(err, io.EOF) || status.Code(err) == codes.DeadlineExceeded {
						err = nil
					}
				} else {
					err = d.Conn.Invoke(ctx, full, req, resp)
				}
				code := status.Code(err)
				switch {
				case notYet[name] && code != codes.Unimplemented:
					t.Errorf("%s: %v, expected Unimplemented (update notYet)", name, err)
				case !notYet[name] && code == codes.Unimplemented:
					t.Errorf("%s is not implemented: %v", name, err)
				}
			})
		}
	}
	if n < 40 {
		t.Fatalf("only %d RPCs found in the API", n)
	}
}
