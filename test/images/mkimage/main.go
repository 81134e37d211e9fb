// Command mkimage builds berth's offline test images and pushes them to a
// registry. It is the Go half of hack/build-images and hack/registry.
//
//	mkimage build -out DIR -rootfs NAME=DIR ...   build every image of the table (images.go)
//	                                              into DIR/oci/NAME/KEY (OCI layouts), reusing
//	                                              any whose inputs did not change; write DIR/current.json
//	mkimage kind -out DIR -dest DEST -rootfs NAME=DIR ... -kubernetes V -etcd TAG -coredns V -pause TAG -flannel V [-arch arm64]
//	                                              build the kind node's images (kind.go) into DIR/oci the
//	                                              same way; write DEST/NAME.tar (OCI layout, reference
//	                                              annotated) for each and DEST/images.txt
//	mkimage e2e -out DIR -rootfs NAME=DIR ... -agnhost TAG,TAG
//	                                              build the Kubernetes e2e suites' images (e2e.go) into
//	                                              DIR/oci the same way; write DIR/e2e.json
//	mkimage push -images DIR -registry HOST:PORT [-user U -password P] [-current FILE]
//	                                              push what current.json (or FILE, e.g. e2e.json) lists,
//	                                              under all its references
//	mkimage list                                  print every reference the table pushes
//	mkimage htpasswd USER PASSWORD                print an htpasswd line (bcrypt)
//	mkimage freeport                              print a free TCP port on 127.0.0.1
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/crypto/bcrypt"
)

type rootfsFlag map[string]string

func (f rootfsFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f rootfsFlag) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=DIR, got %q", v)
	}
	f[name] = dir
	return nil
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: mkimage build -out DIR [-rootfs NAME=DIR ...]
       mkimage kind -out DIR -dest DEST [-rootfs NAME=DIR ...] -kubernetes V -etcd TAG -coredns V -pause TAG -flannel V [-arch arm64]
       mkimage e2e -out DIR [-rootfs NAME=DIR ...] -agnhost TAG[,TAG...]
       mkimage push -images DIR -registry HOST:PORT [-user USER -password PASSWORD] [-jobs N] [-current FILE]
       mkimage list
       mkimage htpasswd USER PASSWORD
       mkimage freeport`)
	os.Exit(2)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("mkimage: ")
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch cmd {
	case "build":
		out := fs.String("out", os.Getenv("BERTH_IMAGES"), "image cache directory ($BERTH_IMAGES)")
		rootfs := rootfsFlag{}
		fs.Var(rootfs, "rootfs", "NAME=DIR: a root filesystem the table refers to (repeatable)")
		fs.Parse(args)
		if *out == "" {
			log.Fatal("build: -out or $BERTH_IMAGES is required")
		}
		err = build(*out, rootfs)
	case "kind":
		out := fs.String("out", os.Getenv("BERTH_IMAGES"), "image cache directory ($BERTH_IMAGES)")
		dest := fs.String("dest", "", "directory for the image tars and images.txt")
		rootfs := rootfsFlag{}
		fs.Var(rootfs, "rootfs", "NAME=DIR: a root filesystem the table refers to (repeatable)")
		var t kindTags
		fs.StringVar(&t.kubernetes, "kubernetes", "", "tag of kube-apiserver, -controller-manager, -scheduler, -proxy")
		fs.StringVar(&t.etcd, "etcd", "", "tag of etcd")
		fs.StringVar(&t.coredns, "coredns", "", "tag of coredns")
		fs.StringVar(&t.pause, "pause", "", "tag of pause")
		fs.StringVar(&t.flannel, "flannel", "", "tag of flannel")
		arch := fs.String("arch", "amd64", "architecture of the binaries: amd64 or arm64")
		fs.Parse(args)
		switch *arch {
		case "amd64":
			t.platform = linuxAMD64
		case "arm64":
			t.platform = linuxARM64
		default:
			log.Fatalf("kind: -arch %q: want amd64 or arm64", *arch)
		}
		if *out == "" || *dest == "" || t.kubernetes == "" || t.etcd == "" || t.coredns == "" || t.pause == "" || t.flannel == "" {
			log.Fatal("kind: -out (or $BERTH_IMAGES), -dest and every tag are required")
		}
		err = buildKind(*out, *dest, rootfs, t)
	case "e2e":
		out := fs.String("out", os.Getenv("BERTH_IMAGES"), "image cache directory ($BERTH_IMAGES)")
		rootfs := rootfsFlag{}
		fs.Var(rootfs, "rootfs", "NAME=DIR: a root filesystem the table refers to (repeatable)")
		agnhost := fs.String("agnhost", "", "agnhost's tags, comma-separated, the newest first (a -rootfs agnhost-TAG each)")
		fs.Parse(args)
		if *out == "" || *agnhost == "" {
			log.Fatal("e2e: -out (or $BERTH_IMAGES) and -agnhost are required")
		}
		err = buildE2E(*out, rootfs, e2eVersions{agnhost: strings.Split(*agnhost, ",")})
	case "push":
		images := fs.String("images", os.Getenv("BERTH_IMAGES"), "image cache directory ($BERTH_IMAGES)")
		current := fs.String("current", "current.json", "the list of built images in the cache directory")
		registry := fs.String("registry", "", "registry HOST:PORT (plain HTTP)")
		user := fs.String("user", "", "basic auth user")
		password := fs.String("password", os.Getenv("BERTH_PUSH_PASSWORD"), "basic auth password ($BERTH_PUSH_PASSWORD)")
		jobs := fs.Int("jobs", 4, "images pushed at once")
		fs.Parse(args)
		if *images == "" || *registry == "" {
			log.Fatal("push: -images (or $BERTH_IMAGES) and -registry are required")
		}
		err = push(ctx, *images, *current, *registry, *user, *password, max(*jobs, 1))
	case "list":
		fs.Parse(args)
		for _, s := range images() {
			for _, r := range s.refs {
				fmt.Println(r)
			}
		}
		for _, s := range indexes() {
			for _, r := range s.refs {
				fmt.Println(r)
			}
		}
	case "htpasswd":
		fs.Parse(args)
		if fs.NArg() != 2 {
			usage()
		}
		// The lowest cost: the registry checks the password on every request,
		// and this is a test credential.
		var hash []byte
		hash, err = bcrypt.GenerateFromPassword([]byte(fs.Arg(1)), bcrypt.MinCost)
		if err == nil {
			fmt.Printf("%s:%s\n", fs.Arg(0), hash)
		}
	case "freeport":
		fs.Parse(args)
		var l net.Listener
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			fmt.Println(l.Addr().(*net.TCPAddr).Port)
			l.Close()
		}
	default:
		usage()
	}
	if err != nil {
		log.Fatal(err)
	}
}
