package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/image"
)

type fakeImages struct {
	err      error
	body     string
	opts     image.ImportOptions
	tagged   [2]string
	tagForce bool
	pulls    []image.PullStatus
}

func (f *fakeImages) Pulls() []image.PullStatus { return f.pulls }

func (f *fakeImages) Import(ctx context.Context, r io.Reader, opts image.ImportOptions) ([]image.Imported, error) {
	b, _ := io.ReadAll(r)
	f.body, f.opts = string(b), opts
	if f.err != nil {
		return nil, f.err
	}
	return []image.Imported{{ID: "sha256:abc", RepoTags: []string{"docker.io/library/a:1"}, Pinned: opts.Pinned}}, nil
}

func (f *fakeImages) Tag(ctx context.Context, src, target string, force bool) (image.Image, error) {
	f.tagged, f.tagForce = [2]string{src, target}, force
	if f.err != nil {
		return image.Image{}, f.err
	}
	return image.Image{ID: "sha256:abc", RepoTags: []string{target}}, nil
}

// serve runs the handler on a unix socket beside a fake CRI address and
// returns a client of it.
func serve(t *testing.T, images Images) *Client {
	t.Helper()
	dir := t.TempDir()
	cri := filepath.Join(dir, "berth.sock")
	l, err := net.Listen("unix", SocketPath(cri))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewHandler(images, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	// The client follows a symlinked CRI address to the real socket's dir.
	link := filepath.Join(t.TempDir(), "containerd.sock")
	if err := os.Symlink(cri, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cri, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return NewClient(link)
}

func TestImport(t *testing.T) {
	f := &fakeImages{}
	c := serve(t, f)
	imgs, err := c.Import(context.Background(), strings.NewReader("tar bytes"), true)
	if err != nil {
		t.Fatal(err)
	}
	if f.body != "tar bytes" || !f.opts.Pinned || len(imgs) != 1 || imgs[0].ID != "sha256:abc" || !imgs[0].Pinned {
		t.Errorf("body %q opts %+v answer %+v", f.body, f.opts, imgs)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("import: %w: bad", image.ErrInvalidArchive), http.StatusBadRequest},
		{fmt.Errorf("%w: x", image.ErrInvalidReference), http.StatusBadRequest},
		{fmt.Errorf("%w: x", image.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("%w: x", image.ErrAlreadyExists), http.StatusConflict},
		{fmt.Errorf("write: %w", syscall.ENOSPC), http.StatusInsufficientStorage},
		{errors.New("something else"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			c := serve(t, &fakeImages{err: tt.err})
			_, err := c.Import(context.Background(), strings.NewReader("x"), false)
			var e *Error
			if !errors.As(err, &e) || e.Status != tt.want || e.Message != tt.err.Error() {
				t.Errorf("import: %v, want status %d with the error's text", err, tt.want)
			}
			_, err = c.Tag(context.Background(), "a", "b", false)
			if !errors.As(err, &e) || e.Status != tt.want {
				t.Errorf("tag: %v, want status %d", err, tt.want)
			}
		})
	}
}

func TestTag(t *testing.T) {
	f := &fakeImages{}
	c := serve(t, f)
	got, err := c.Tag(context.Background(), "sha256:abc", "example.com/x:1", true)
	if err != nil {
		t.Fatal(err)
	}
	if f.tagged != [2]string{"sha256:abc", "example.com/x:1"} || !f.tagForce || got.ID != "sha256:abc" {
		t.Errorf("tagged %v force %v, answer %+v", f.tagged, f.tagForce, got)
	}
	if _, err := c.Tag(context.Background(), "", "x", false); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("empty source: %v", err)
	}
}

func TestPulls(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []image.PullStatus{{Ref: "example.com/x:1", Started: started, LayersDone: 1, LayersTotal: 3, BytesDone: 10, BytesTotal: 30, BytesPerSecond: 5}}
	c := serve(t, &fakeImages{pulls: want})
	got, err := c.Pulls(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pulls %+v, want %+v", got, want)
	}
	got, err = serve(t, &fakeImages{}).Pulls(context.Background())
	if err != nil || len(got) != 0 {
		t.Errorf("no pulls: %+v, %v", got, err)
	}
}

func TestNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "berth.sock"))
	_, err := c.Import(context.Background(), strings.NewReader("x"), false)
	if err == nil || !strings.Contains(err.Error(), "is the daemon running") {
		t.Errorf("import without a daemon: %v", err)
	}
}
