package server

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSendChunks(t *testing.T) {
	small := func(n int) []*runtimeapi.PodSandbox {
		out := make([]*runtimeapi.PodSandbox, n)
		for i := range out {
			out[i] = &runtimeapi.PodSandbox{Id: "x"}
		}
		return out
	}
	big := func(n int) []*runtimeapi.PodSandbox {
		out := make([]*runtimeapi.PodSandbox, n)
		for i := range out {
			out[i] = &runtimeapi.PodSandbox{Id: strings.Repeat("x", 900<<10)}
		}
		return out
	}
	tests := []struct {
		name  string
		items []*runtimeapi.PodSandbox
		want  []int
	}{
		{"none: no message", nil, nil},
		{"one", small(1), []int{1}},
		{"by count", small(2500), []int{1000, 1000, 500}},
		{"by size", big(5), []int{2, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			total := 0
			sendChunks(tt.items, func(c []*runtimeapi.PodSandbox) error {
				got = append(got, len(c))
				total += len(c)
				return nil
			})
			if len(got) != len(tt.want) || total != len(tt.items) {
				t.Fatalf("chunks %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("chunks %v, want %v", got, tt.want)
				}
			}
		})
	}
}
