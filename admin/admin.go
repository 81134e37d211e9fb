// Package admin is berth's private API: what a node needs beyond the CRI,
// which has no call for it: loading image archives (kind load, node image
// builds), tagging images and listing the pulls in flight with their
// progress. It is HTTP on a unix socket beside the CRI
// socket, <address>.admin, as containerd keeps its ttrpc socket beside its
// gRPC one; the socket is root's alone (0600).
//
// Why HTTP on a second socket and not one more gRPC service on the CRI
// socket: an import is one stream of up to gigabytes, which HTTP carries as
// a request body copied straight into the image store, where gRPC would
// need a hand-chunked client stream and a protobuf schema generated and
// kept beside the CRI's; a client that goes away ends the request, whose
// cancelled context makes the import leave nothing. And the CRI socket,
// which a socket group may open to others, stays exactly the CRI.
//
// The handler only decodes requests and maps errors to HTTP statuses; the
// behaviour is the image package's.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/errdefs"
)

// SocketSuffix is appended to the CRI socket's path to name the admin one.
const SocketSuffix = ".admin"

// SocketPath is the admin socket of the daemon serving CRI on criAddress.
func SocketPath(criAddress string) string { return criAddress + SocketSuffix }

// Paths of the API.
const (
	ImportPath = "/v1/images/import" // POST, the archive as body; ?pinned=true
	TagPath    = "/v1/images/tag"    // POST, a TagRequest
	PullsPath  = "/v1/images/pulls"  // GET: the pulls in flight, a PullsResponse
)

// Images is what the API serves; *image.Service implements it.
type Images interface {
	Import(ctx context.Context, r io.Reader, opts image.ImportOptions) ([]image.Imported, error)
	Tag(ctx context.Context, src, target string, force bool) (image.Image, error)
	Pulls() []image.PullStatus
}

// PullsResponse lists the pulls in flight, oldest first.
type PullsResponse struct {
	Pulls []image.PullStatus `json:"pulls"`
}

// ImportResponse answers an import.
type ImportResponse struct {
	Images []image.Imported `json:"images"`
}

// TagRequest asks for target to name the image source refers to.
type TagRequest struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Force  bool   `json:"force,omitempty"` // move target from another image
}

// TagResponse is the tagged image.
type TagResponse struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags"`
}

// errorResponse is the body of every answer that is not 200.
type errorResponse struct {
	Error string `json:"error"`
}

// NewHandler serves the API over images.
func NewHandler(images Images, log *slog.Logger) http.Handler {
	h := &handler{images: images, log: log.With("component", "admin")}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ImportPath, h.importImages)
	mux.HandleFunc("POST "+TagPath, h.tag)
	mux.HandleFunc("GET "+PullsPath, h.pulls)
	return mux
}

type handler struct {
	images Images
	log    *slog.Logger
}

func (h *handler) importImages(w http.ResponseWriter, r *http.Request) {
	var opts image.ImportOptions
	if v := r.URL.Query().Get("pinned"); v != "" {
		pinned, err := strconv.ParseBool(v)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("pinned=%q: want true or false", v))
			return
		}
		opts.Pinned = pinned
	}
	imgs, err := h.images.Import(r.Context(), r.Body, opts)
	if err != nil {
		h.fail(w, r, errdefs.HTTPStatus(err), err)
		return
	}
	h.reply(w, ImportResponse{Images: imgs})
}

func (h *handler) tag(w http.ResponseWriter, r *http.Request) {
	var req TagRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("tag request: %w", err))
		return
	}
	if req.Source == "" || req.Target == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("tag request: source and target are required"))
		return
	}
	img, err := h.images.Tag(r.Context(), req.Source, req.Target, req.Force)
	if err != nil {
		h.fail(w, r, errdefs.HTTPStatus(err), err)
		return
	}
	h.reply(w, TagResponse{ID: img.ID, RepoTags: img.RepoTags})
}

func (h *handler) pulls(w http.ResponseWriter, r *http.Request) {
	h.reply(w, PullsResponse{Pulls: h.images.Pulls()})
}

func (h *handler) reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		h.log.Warn("write answer", "error", err)
	}
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	h.log.Warn("admin request failed", "path", r.URL.Path, "status", code, "error", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorResponse{Error: err.Error()})
}
