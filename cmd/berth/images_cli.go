package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/berth-runtime/berth/admin"
	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/config"
)

const imagesUsage = `usage: berth images import [--pinned] [--address SOCKET | --root DIR] [FILE|-]...
       berth images tag [--force] [--address SOCKET | --root DIR] SOURCE NAME
       berth images pulls [--address SOCKET]

import loads image archives: what docker save writes (Docker 20.10's
docker-archive, or the OCI layout of Docker 25 and later) or an OCI image
layout tar, from each FILE or from standard input ("-", or no FILE). Each
imported image is printed as its ID and the names the archive gives it;
an image it does not name is still stored, found by its ID. --pinned marks the
images pinned: the kubelet's image GC never removes them.

tag makes NAME name the image SOURCE refers to (an ID, a prefix of one, a
tag or a digest). A NAME that names another image is moved only with
--force.

pulls lists the daemon's pulls in flight: the reference, layers stored of
the image's, compressed bytes done of the total, the rate since the first
byte and the time since the pull began. Concurrent pulls of one image are
one pull.

They talk to the running daemon (the admin socket beside its CRI socket,
--address or the config file's address). With --root DIR they work with no
daemon on the store of a berth whose root is DIR, as a node image build
preloads images; that is refused while a daemon uses DIR.

The daemon's --config, --address and --root apply as they do to it.`

func imagesCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "import" && args[0] != "tag" && args[0] != "pulls") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, imagesUsage)
			return 0
		}
		fmt.Fprintln(stderr, imagesUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("berth images "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfgFlags := config.RegisterFlags(fs)
	pinned := fs.Bool("pinned", false, "mark the imported images pinned")
	force := fs.Bool("force", false, "move NAME from the image it names")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, imagesUsage)
			return 0
		}
		fmt.Fprintf(stderr, "berth images %s: %v (see berth images --help)\n", verb, err)
		return 2
	}
	offline := false
	fs.Visit(func(f *flag.Flag) { offline = offline || f.Name == "root" })
	cfg, err := cfgFlags.Load()
	if err != nil {
		fmt.Fprintf(stderr, "berth images %s: %v\n", verb, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if verb == "pulls" {
		if offline || *pinned || *force || fs.NArg() != 0 {
			fmt.Fprintln(stderr, "berth images pulls: takes no arguments and needs the daemon (no --root)")
			return 2
		}
		if err := listPulls(ctx, admin.NewClient(cfg.Address), stdout); err != nil {
			fmt.Fprintf(stderr, "berth images pulls: %v\n", err)
			return 1
		}
		return 0
	}

	var imgs imageClient
	if offline {
		store, closeStore, err := openOffline(ctx, cfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "berth images %s: %v\n", verb, err)
			return 1
		}
		defer closeStore()
		imgs = store
	} else {
		imgs = daemonImages{admin.NewClient(cfg.Address)}
	}

	switch verb {
	case "import":
		if *force {
			fmt.Fprintln(stderr, "berth images import: --force is tag's flag")
			return 2
		}
		err = importFiles(ctx, imgs, fs.Args(), *pinned, stdin, stdout)
	case "tag":
		if *pinned || fs.NArg() != 2 {
			fmt.Fprintln(stderr, imagesUsage)
			return 2
		}
		var img image.Image
		if img, err = imgs.Tag(ctx, fs.Arg(0), fs.Arg(1), *force); err == nil {
			fmt.Fprintf(stdout, "%s %s\n", img.ID, strings.Join(img.RepoTags, " "))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "berth images %s: %v\n", verb, err)
		return 1
	}
	return 0
}

// imageClient is the image store, through the daemon or opened here.
type imageClient interface {
	Import(ctx context.Context, r io.Reader, opts image.ImportOptions) ([]image.Imported, error)
	Tag(ctx context.Context, src, target string, force bool) (image.Image, error)
}

type daemonImages struct{ c *admin.Client }

func (d daemonImages) Import(ctx context.Context, r io.Reader, opts image.ImportOptions) ([]image.Imported, error) {
	return d.c.Import(ctx, r, opts.Pinned)
}

func (d daemonImages) Tag(ctx context.Context, src, target string, force bool) (image.Image, error) {
	resp, err := d.c.Tag(ctx, src, target, force)
	return image.Image{ID: resp.ID, RepoTags: resp.RepoTags}, err
}

// openOffline opens the image store of cfg.Root, holding the root's lock
// as a daemon does, so that neither can write it under the other.
func openOffline(ctx context.Context, cfg *config.Config, stderr io.Writer) (*image.Service, func(), error) {
	if err := os.MkdirAll(cfg.Root, 0o711); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", cfg.Root, err)
	}
	unlock, err := lockRoot(cfg.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: a daemon uses this root; leave out --root to go through it", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := newImages(ctx, cfg, log, nil, nil)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	// Layers are published before they are flushed (image/sync.go); a
	// store preloaded into a node image is next opened on another boot,
	// so everything is flushed before the command lets go of the root.
	return store, func() {
		if err := store.Flush(context.WithoutCancel(ctx)); err != nil {
			log.Error("flush image store", "error", err)
		}
		unlock()
	}, nil
}

func importFiles(ctx context.Context, imgs imageClient, files []string, pinned bool, stdin io.Reader, stdout io.Writer) error {
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, name := range files {
		r := stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		got, err := imgs.Import(ctx, r, image.ImportOptions{Pinned: pinned})
		if err != nil {
			if name != "-" {
				return fmt.Errorf("%s: %w", name, err)
			}
			return err
		}
		for _, img := range got {
			names := strings.Join(img.RepoTags, " ")
			if names == "" {
				names = "(untagged)"
			}
			fmt.Fprintf(stdout, "%s %s\n", img.ID, names)
		}
	}
	return nil
}

func listPulls(ctx context.Context, c *admin.Client, stdout io.Writer) error {
	pulls, err := c.Pulls(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REF\tLAYERS\tDONE\tTOTAL\tRATE\tELAPSED")
	for _, p := range pulls {
		fmt.Fprintf(w, "%s\t%d/%d\t%s\t%s\t%s/s\t%s\n", p.Ref, p.LayersDone, p.LayersTotal,
			humanBytes(float64(p.BytesDone)), humanBytes(float64(p.BytesTotal)), humanBytes(p.BytesPerSecond),
			time.Since(p.Started).Round(100*time.Millisecond))
	}
	return w.Flush()
}

func humanBytes(n float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f%s", n, units[i])
	}
	return fmt.Sprintf("%.1f%s", n, units[i])
}
