package image_test

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

// A pull keeps no compressed copy of a layer: layers are unpacked as they
// arrive, so the image store never holds more than the unpacked image
// (plus 5% for directories and records). The store is measured every
// 20 ms during a pull of berth-test/big (~100 MiB of incompressible data)
// slowed down so that many samples fall inside it.
func TestPullDiskPeak(t *testing.T) {
	reg := registry(t)
	p := newProxy(t, reg)
	p.set(func(p *proxy) { p.rate = 8 << 20 })
	d := framework.StartDaemon(t)
	root := filepath.Join(d.Root, "image")

	stop := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var max int64
		for {
			if n := usage(root); n > max {
				max = n
			}
			select {
			case <-stop:
				peak <- max
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	pull(t, d, p.Host+"/berth-test/big:latest")
	close(stop)
	max, final := <-peak, usage(root)
	t.Logf("image store: peak %d bytes during the pull, %d after (%.3fx)", max, final, float64(max)/float64(final))
	if final < 100<<20 {
		t.Fatalf("image store holds %d bytes after the pull, want the unpacked ~100 MiB", final)
	}
	if max > final+final/20 {
		t.Errorf("image store peaked at %d bytes during the pull, more than 1.05x the %d it holds after", max, final)
	}
}

// usage is the disk space of the files under root, each inode once.
func usage(root string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // a temp dir renamed or removed meanwhile
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil || seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		n += st.Blocks * 512
		return nil
	})
	return n
}
