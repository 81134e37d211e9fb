package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/berth-runtime/berth/admin"
	"github.com/berth-runtime/berth/image"
)

// adminServer serves the admin API (package admin) beside the CRI socket.
type adminServer struct {
	sock *socket
	srv  *http.Server
}

// listenAdmin listens on the admin socket of criAddress. It needs no lock
// of its own: its path follows from the CRI socket's, whose lock the
// caller holds, so a socket already there is a crashed daemon's.
func listenAdmin(criAddress string, images *image.Service, log *slog.Logger) (*adminServer, error) {
	path := admin.SocketPath(criAddress)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale admin socket: %w", err)
		}
	}
	// Root's alone, from the moment it exists: an import or a tag changes
	// what every pod of the node runs.
	l, err := listenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	created, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("stat admin socket: %w", err)
	}
	return &adminServer{
		sock: &socket{path: path, listener: l, created: created},
		// No read timeout: an archive may take minutes to arrive.
		srv: &http.Server{Handler: admin.NewHandler(images, log), ReadHeaderTimeout: 10 * time.Second},
	}, nil
}

func (a *adminServer) serve() error {
	if err := a.srv.Serve(a.sock.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve admin API on %s: %w", a.sock.path, err)
	}
	return nil
}

// close ends the requests in progress: an import cut off leaves nothing.
func (a *adminServer) close(log *slog.Logger) {
	a.srv.Close()
	a.sock.remove(log)
}
