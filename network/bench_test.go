package network

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/berth-runtime/berth/network/cnitest"
)

// BenchmarkCNIAttach measures the network part of a pod's start and
// teardown on cnitest's bridge network (bridge + host-local with ipMasq,
// portmap, loopback): netns create+pin, CNI ADD, CNI DEL, unpin.
// Medians over 20 pods per iteration:
//
//	go test ./network -run '^$' -bench CNIAttach -benchtime 1x
func BenchmarkCNIAttach(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ctx := context.Background()
	n := cnitest.NewNet(b)
	c, err := NewCNI(Config{ConfDir: n.ConfDir, BinDirs: []string{n.BinDir}, CacheDir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	nss, err := NewNetNS(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	var create, add, del, remove []time.Duration
	for i := 0; i < b.N; i++ {
		for p := range 20 {
			id := fmt.Sprintf("bench%d-%d", i, p)
			t0 := time.Now()
			path, err := nss.Create(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			pod := &Pod{ID: id, Name: id, Namespace: "bench", UID: id, NetNS: path}
			if _, err := c.Setup(ctx, pod); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := c.Teardown(ctx, pod); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			if err := nss.Remove(ctx, path); err != nil {
				b.Fatal(err)
			}
			t4 := time.Now()
			create, add, del, remove = append(create, t1.Sub(t0)), append(add, t2.Sub(t1)), append(del, t3.Sub(t2)), append(remove, t4.Sub(t3))
		}
	}
	b.ReportMetric(medianMS(create), "netns-ms/median")
	b.ReportMetric(medianMS(add), "add-ms/median")
	b.ReportMetric(medianMS(del), "del-ms/median")
	b.ReportMetric(medianMS(remove), "unpin-ms/median")
}

func medianMS(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return float64(m.Microseconds()) / 1000
}
