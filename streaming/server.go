// Package streaming is berth's streaming server: the HTTP endpoint behind
// the URLs that the Exec, Attach and PortForward RPCs return.
//
// Each RPC stores its request under a single-use, expiring token and
// answers with http://<address>/<exec|attach|portforward>/<token>. The
// client (the kubelet, crictl) then upgrades a request to that URL to a
// multiplexed stream connection. The protocols are k8s.io/cri-streaming's
// (SPDY, and the v4 channel protocols over WebSocket), plus two that it
// lacks and current clients speak: remote command v5 over WebSocket
// (client-go's WebSocket executor, crictl --transport websocket) and SPDY
// tunnelled through a WebSocket for port forwarding (client-go's
// SPDY-over-WebSocket dialer).
package streaming

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/berth-runtime/berth/container"
)

// Containers runs the commands and attaches to the containers.
type Containers interface {
	Exec(ctx context.Context, id string, cmd []string, st container.Streams) (int, error)
	Attach(ctx context.Context, id string, st container.Streams) error
}

// Pods finds a pod's network namespace for port forwarding.
type Pods interface {
	// NetNS returns the path of a ready pod's network namespace, or ""
	// for a pod on the host's network.
	NetNS(ctx context.Context, id string) (string, error)
}

// Options configure a Server.
type Options struct {
	// Address is host:port to listen on; port 0 picks a free one. The
	// URLs name the address actually bound, so host must be an address
	// clients can reach (not 0.0.0.0).
	Address    string
	Containers Containers
	Pods       Pods
	Logger     *slog.Logger

	// TokenTTL is how long a URL stays valid (default 1m, as the
	// kubelet's own streaming server).
	TokenTTL time.Duration
	// MaxInFlight bounds URLs handed out and not yet used (default 1000).
	MaxInFlight int
	// IdleTimeout closes a stream connection without traffic (default 4h).
	IdleTimeout time.Duration
	// StreamCreationTimeout bounds how long a client takes to open its
	// streams after the upgrade (default 30s).
	StreamCreationTimeout time.Duration
	now                   func() time.Time // tests
}

// Server serves the streaming URLs.
type Server struct {
	opts   Options
	log    *slog.Logger
	ln     net.Listener
	base   string // http://host:port
	tokens *tokens
	http   *http.Server
	ctx    context.Context // ends with Close: stops the sessions
	cancel context.CancelFunc
}

// New listens on the configured address; Serve serves it.
func New(opts Options) (*Server, error) {
	if opts.Containers == nil || opts.Pods == nil {
		return nil, errors.New("streaming: Containers and Pods are required")
	}
	if opts.Address == "" {
		opts.Address = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Minute
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 1000
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 4 * time.Hour
	}
	if opts.StreamCreationTimeout == 0 {
		opts.StreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	ln, err := net.Listen("tcp", opts.Address)
	if err != nil {
		return nil, fmt.Errorf("streaming: listen on %s: %w", opts.Address, err)
	}
	s := &Server{
		opts:   opts,
		log:    opts.Logger.With("component", "streaming"),
		ln:     ln,
		base:   "http://" + ln.Addr().String(),
		tokens: newTokens(opts.TokenTTL, opts.MaxInFlight, opts.now),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	return s, nil
}

// Addr is the address served.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Close.
func (s *Server) Serve() error {
	if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("streaming: %w", err)
	}
	return nil
}

// Close stops serving and ends every session.
func (s *Server) Close() error {
	s.cancel()
	return s.http.Close()
}

// GetExec validates an Exec request and returns its URL.
func (s *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if req.GetContainerId() == "" {
		return nil, status.Error(codes.InvalidArgument, "container_id is required")
	}
	if len(req.GetCmd()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "cmd is required")
	}
	if err := checkStreams(req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	url, err := s.url("exec", req)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: url}, nil
}

// GetAttach validates an Attach request and returns its URL.
func (s *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if req.GetContainerId() == "" {
		return nil, status.Error(codes.InvalidArgument, "container_id is required")
	}
	if err := checkStreams(req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr()); err != nil {
		return nil, err
	}
	url, err := s.url("attach", req)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: url}, nil
}

// GetPortForward validates a PortForward request and returns its URL.
func (s *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if req.GetPodSandboxId() == "" {
		return nil, status.Error(codes.InvalidArgument, "pod_sandbox_id is required")
	}
	for _, p := range req.GetPort() {
		if p < 1 || p > 65535 {
			return nil, status.Errorf(codes.InvalidArgument, "port %d is out of range", p)
		}
	}
	url, err := s.url("portforward", req)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: url}, nil
}

func checkStreams(tty, stdin, stdout, stderr bool) error {
	if tty && stderr {
		// A terminal has one output: stderr cannot be told apart.
		return status.Error(codes.InvalidArgument, "tty and stderr cannot both be set")
	}
	if !stdin && !stdout && !stderr {
		return status.Error(codes.InvalidArgument, "one of stdin, stdout and stderr must be set")
	}
	return nil
}

func (s *Server) url(kind string, req any) (string, error) {
	tok, err := s.tokens.issue(req)
	if errors.Is(err, errTooManyRequests) {
		return "", status.Error(codes.ResourceExhausted, err.Error())
	}
	if err != nil {
		return "", status.Error(codes.Internal, err.Error())
	}
	return s.base + "/" + kind + "/" + tok, nil
}

// ServeHTTP routes /<kind>/<token>. An unknown, used or expired token is
// 404, as for any URL that does not exist.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	kind, tok, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok || tok == "" || strings.Contains(tok, "/") {
		http.NotFound(w, r)
		return
	}
	req, ok := s.tokens.use(tok)
	if !ok {
		s.log.Debug("streaming URL refused: unknown, used or expired token", "kind", kind)
		http.NotFound(w, r)
		return
	}
	switch req := req.(type) {
	case *runtimeapi.ExecRequest:
		if kind == "exec" {
			s.serveExec(w, r, req)
			return
		}
	case *runtimeapi.AttachRequest:
		if kind == "attach" {
			s.serveAttach(w, r, req)
			return
		}
	case *runtimeapi.PortForwardRequest:
		if kind == "portforward" {
			s.servePortForward(w, r, req)
			return
		}
	}
	http.NotFound(w, r)
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request, req *runtimeapi.ExecRequest) {
	opts := &remotecommand.Options{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, TTY: req.Tty}
	s.log.Debug("exec session", "container", req.ContainerId, "cmd", req.Cmd, "tty", req.Tty, "websocket", wsstream.IsWebSocketRequest(r))
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.serveV5(w, r, opts, func(ctx context.Context, st container.Streams) (int, error) {
			return s.opts.Containers.Exec(ctx, req.ContainerId, req.Cmd, st)
		})
		return
	}
	remotecommand.ServeExec(w, r, adapter{s}, "", "", req.ContainerId, req.Cmd, opts,
		s.opts.IdleTimeout, s.opts.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request, req *runtimeapi.AttachRequest) {
	opts := &remotecommand.Options{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, TTY: req.Tty}
	s.log.Debug("attach session", "container", req.ContainerId, "tty", req.Tty, "websocket", wsstream.IsWebSocketRequest(r))
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.serveV5(w, r, opts, func(ctx context.Context, st container.Streams) (int, error) {
			return 0, s.opts.Containers.Attach(ctx, req.ContainerId, st)
		})
		return
	}
	remotecommand.ServeAttach(w, r, adapter{s}, "", "", req.ContainerId, opts,
		s.opts.IdleTimeout, s.opts.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request, req *runtimeapi.PortForwardRequest) {
	s.log.Debug("port-forward session", "pod", req.PodSandboxId, "ports", req.Port, "websocket", wsstream.IsWebSocketRequest(r))
	if wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		s.serveTunnel(w, r, req.PodSandboxId)
		return
	}
	opts, err := portforward.BuildV4Options(req.Port)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, adapter{s}, req.PodSandboxId, "", opts,
		s.opts.IdleTimeout, s.opts.StreamCreationTimeout, portforward.SupportedProtocols)
}
