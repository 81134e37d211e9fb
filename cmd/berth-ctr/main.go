// Command berth-ctr stands in for containerd's `containerd` and `ctr`
// binaries in a node whose runtime is berth, for exactly the calls kind
// makes into a node (sigs.k8s.io/kind v0.33.0, pkg/cluster/nodeutils):
//
//	containerd config dump          kind reads the snapshotter from it
//	ctr --namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -
//	ctr --namespace=k8s.io images tag --force <image id> <name>
//
// plus --version of both, and --label=io.cri-containerd.pinned=pinned on
// import (kind's node image build pins with it). It is installed as
// /usr/local/bin/ctr and /usr/local/bin/containerd and acts on argv[0];
// run as berth-ctr, its first argument names which it is. Everything else
// fails with a message saying so: berth is not containerd, and a command
// that half-worked would mislead more than one that says no.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/berth-runtime/berth/admin"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/version"
)

// criNamespace is the only containerd namespace berth has an equivalent
// of: the CRI's, where the kubelet's images live.
const criNamespace = "k8s.io"

// snapshotter is what berth's layers are, in containerd's words.
const snapshotter = "overlayfs"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

type env func(string) string

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv env) int {
	prog := filepath.Base(args[0])
	args = args[1:]
	if prog != "ctr" && prog != "containerd" {
		if len(args) == 0 || (args[0] != "ctr" && args[0] != "containerd") {
			fmt.Fprintln(stderr, "usage: berth-ctr ctr|containerd ARGS... (or install it as ctr and containerd)")
			return 2
		}
		prog, args = args[0], args[1:]
	}
	var err error
	if prog == "containerd" {
		err = containerdMain(args, stdout)
	} else {
		err = ctrMain(ctx, args, stdin, stdout, getenv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		var u unsupported
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// unsupported is a command line the stand-in does not implement.
type unsupported struct{ prog, line string }

func (u unsupported) Error() string {
	return fmt.Sprintf("berth's %s stand-in does not implement %q: berth, not containerd, is this node's runtime; use crictl or berth (berth images --help)", u.prog, u.line)
}

func notImplemented(prog string, args []string) error {
	return unsupported{prog: prog, line: strings.TrimSpace(prog + " " + strings.Join(args, " "))}
}

// errUnsupported: a sub-command met a flag or form it does not implement;
// the whole command line is reported.
var errUnsupported = errors.New("not implemented")

func versionLine(prog string) string {
	return fmt.Sprintf("%s berth-ctr %s (berth's stand-in for containerd's %s)", prog, version.Version, prog)
}

// configDump is the part of containerd's configuration kind reads: the
// version 3 layout (containerd 2.x) and its image snapshotter.
const configDump = `# berth's stand-in for containerd: berth, not containerd, runs this node's
# containers. Only what kind reads is here.
version = 3

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "` + snapshotter + `"
`

func containerdMain(args []string, stdout io.Writer) error {
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-v"):
		fmt.Fprintln(stdout, versionLine("containerd"))
		return nil
	case len(args) == 2 && args[0] == "config" && args[1] == "dump":
		_, err := io.WriteString(stdout, configDump)
		return err
	}
	return notImplemented("containerd", args)
}

// globals are ctr's global flags the stand-in understands.
type globals struct {
	namespace string
	address   string
}

func ctrMain(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, getenv env) error {
	orig := args
	g := globals{namespace: getenv("CONTAINERD_NAMESPACE"), address: getenv("CONTAINERD_ADDRESS")}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		args = args[1:]
		var dst *string
		switch name {
		case "version", "v":
			if len(args) > 0 || hasValue {
				return notImplemented("ctr", orig)
			}
			fmt.Fprintln(stdout, versionLine("ctr"))
			return nil
		case "namespace", "n":
			dst = &g.namespace
		case "address", "a":
			dst = &g.address
		default:
			return notImplemented("ctr", orig)
		}
		if !hasValue {
			if len(args) == 0 {
				return fmt.Errorf("flag --%s needs a value", name)
			}
			value, args = args[0], args[1:]
		}
		*dst = value
	}
	if len(args) == 1 && args[0] == "version" {
		fmt.Fprintln(stdout, versionLine("ctr"))
		return nil
	}
	if len(args) < 2 || (args[0] != "images" && args[0] != "image" && args[0] != "i") {
		return notImplemented("ctr", orig)
	}
	var run func(context.Context, []string, io.Reader, io.Writer, *admin.Client) error
	switch args[1] {
	case "import":
		run = ctrImport
	case "tag":
		run = ctrTag
	default:
		return notImplemented("ctr", orig)
	}
	if g.namespace != criNamespace {
		ns := g.namespace
		if ns == "" {
			ns = "default"
		}
		return fmt.Errorf("namespace %q: berth keeps images for the CRI only, as containerd's namespace %s (pass --namespace=%s)", ns, criNamespace, criNamespace)
	}
	addr, err := criAddress(g.address)
	if err != nil {
		return err
	}
	err = run(ctx, args[2:], stdin, stdout, admin.NewClient(addr))
	if errors.Is(err, errUnsupported) {
		return notImplemented("ctr", orig)
	}
	return err
}

// criAddress is the CRI socket berth serves: ctr's --address or
// $CONTAINERD_ADDRESS when given, else berth's config file's.
func criAddress(flagValue string) (string, error) {
	if flagValue != "" {
		return strings.TrimPrefix(flagValue, "unix://"), nil
	}
	data, err := os.ReadFile(config.DefaultPath)
	if errors.Is(err, os.ErrNotExist) {
		return config.Default().Address, nil
	}
	if err != nil {
		return "", err
	}
	cfg, err := config.Parse(string(data))
	if err != nil {
		return "", fmt.Errorf("%s: %w", config.DefaultPath, err)
	}
	return cfg.Address, nil
}

// ctrImport is `ctr images import [flags] FILE|-`, with the flags kind
// passes. --all-platforms and --digests change nothing: berth stores the
// node's platform of a multi-platform archive, never fails for the
// others' missing blobs, and records a repository digest wherever the
// archive gives a manifest digest.
func ctrImport(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, c *admin.Client) error {
	pinned := false
	var file string
	for _, a := range args {
		name, value, _ := strings.Cut(a, "=")
		switch {
		case a == "--all-platforms", a == "--digests":
		case name == "--snapshotter" && value == snapshotter:
		case name == "--snapshotter":
			return fmt.Errorf("snapshotter %q: berth's layers are %s", value, snapshotter)
		case a == "--label=io.cri-containerd.pinned=pinned":
			pinned = true
		case a == "-" || !strings.HasPrefix(a, "-"):
			if file != "" {
				return errUnsupported // ctr takes one archive
			}
			file = a
		default:
			return errUnsupported
		}
	}
	if file == "" {
		return errors.New("images import: name the archive, or - for standard input")
	}
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	imgs, err := c.Import(ctx, r, pinned)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		names := img.RepoTags
		if len(names) == 0 {
			names = []string{img.ID}
		}
		for _, n := range names {
			fmt.Fprintf(stdout, "unpacking %s (%s)...done\n", n, img.ID)
		}
	}
	return nil
}

// ctrTag is `ctr images tag [--force] SOURCE TARGET...`.
func ctrTag(ctx context.Context, args []string, _ io.Reader, stdout io.Writer, c *admin.Client) error {
	force := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		if args[0] != "--force" {
			return errUnsupported
		}
		force, args = true, args[1:]
	}
	if len(args) < 2 {
		return errors.New("images tag: want SOURCE TARGET...")
	}
	for _, target := range args[1:] {
		if _, err := c.Tag(ctx, args[0], target, force); err != nil {
			return err
		}
		fmt.Fprintln(stdout, target)
	}
	return nil
}
