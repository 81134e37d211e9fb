// Command gpucdi writes a CDI spec (kind nvidia.com/gpu) for the NVIDIA
// GPUs of the machine it runs on, from what is there: the device nodes
// under /dev and the driver's libraries in the dynamic linker's cache.
//
//	gpucdi -out /var/run/cdi/nvidia-gpu.json
//	gpucdi -image-layer LAYER.tar -image-tag REF -out IMAGE.tar
//
// The second form writes the image the check's container runs, of one
// layer, as a `docker save` archive.
//
// It stands in for nvidia-ctk's `cdi generate` on a machine that has the
// driver and not the toolkit (hack/gpu-cdi runs it on the device machine).
// Every GPU node /dev/nvidiaN is a device named N, and "all" is every one
// of them; the control nodes (nvidiactl, nvidia-uvm, nvidia-caps/...),
// the libraries and nvidia-smi go with any of them. The libraries are
// mounted into a directory of their own on LD_LIBRARY_PATH, as GKE's
// /usr/local/nvidia/lib64 is, so that the image's distribution does not
// matter, only that it has a C library.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

func main() {
	devDir := flag.String("dev", "/dev", "where the device nodes are")
	cache := flag.String("ldcache", "", "a file holding `ldconfig -p`'s output (default: run it)")
	smi := flag.String("nvidia-smi", "", "nvidia-smi's path (default: looked up on PATH)")
	out := flag.String("out", "", "the spec file to write (default: standard output)")
	layer := flag.String("image-layer", "", "write an image of this layer tar to -out instead")
	tag := flag.String("image-tag", "berth-test/gpu:latest", "the image's tag (with -image-layer)")
	flag.Parse()
	var err error
	if *layer != "" {
		err = writeImage(*layer, *tag, *out)
	} else {
		err = run(*devDir, *cache, *smi, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucdi:", err)
		os.Exit(1)
	}
}

func run(devDir, cacheFile, smi, out string) error {
	var cache []byte
	var err error
	if cacheFile != "" {
		cache, err = os.ReadFile(cacheFile)
	} else {
		cache, err = exec.Command("ldconfig", "-p").Output()
	}
	if err != nil {
		return fmt.Errorf("reading the dynamic linker's cache: %w", err)
	}
	if smi == "" {
		if smi, err = exec.LookPath("nvidia-smi"); err != nil {
			return fmt.Errorf("nvidia-smi: %w", err)
		}
	}
	inv, err := scan(devDir, string(cache), runtime.GOARCH)
	if err != nil {
		return err
	}
	inv.smi = smi
	b, err := json.MarshalIndent(inv.spec(), "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	// Written aside and renamed: a runtime watching the directory never
	// reads half a spec.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return writeAside(out, func(f *os.File) error {
		_, err := f.Write(b)
		return err
	})
}

// writeAside writes path through write into a file beside it, renamed
// over path once whole; on any failure the file beside it goes.
func writeAside(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if err = write(f); err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
