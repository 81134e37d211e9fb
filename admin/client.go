package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"

	"github.com/berth-runtime/berth/image"
)

// Client talks to a daemon's admin socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient is a client of the daemon serving CRI on criAddress. A CRI
// address that is a symlink (/run/containerd/containerd.sock pointing at
// berth's socket, say) is followed: the admin socket is beside the real one.
func NewClient(criAddress string) *Client {
	if real, err := filepath.EvalSymlinks(criAddress); err == nil {
		criAddress = real
	}
	socket := SocketPath(criAddress)
	return &Client{
		socket: socket,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		}},
	}
}

// Socket is the admin socket the client connects to.
func (c *Client) Socket() string { return c.socket }

// Error is an answer of the daemon that is not a success.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Import sends the image archive r and returns what the daemon stored.
func (c *Client) Import(ctx context.Context, r io.Reader, pinned bool) ([]image.Imported, error) {
	u := "http://berth" + ImportPath + "?" + url.Values{"pinned": {strconv.FormatBool(pinned)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	var resp ImportResponse
	if err := c.do(req, &resp); err != nil {
		return nil, err
	}
	return resp.Images, nil
}

// Tag makes target name the image source refers to; force moves target
// from another image.
func (c *Client) Tag(ctx context.Context, source, target string, force bool) (TagResponse, error) {
	body, err := json.Marshal(TagRequest{Source: source, Target: target, Force: force})
	if err != nil {
		return TagResponse{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://berth"+TagPath, bytes.NewReader(body))
	if err != nil {
		return TagResponse{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	var resp TagResponse
	return resp, c.do(req, &resp)
}

// Pulls lists the daemon's pulls in flight.
func (c *Client) Pulls(ctx context.Context) ([]image.PullStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://berth"+PullsPath, nil)
	if err != nil {
		return nil, err
	}
	var resp PullsResponse
	if err := c.do(req, &resp); err != nil {
		return nil, err
	}
	return resp.Pulls, nil
}

func (c *Client) do(req *http.Request, out any) error {
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("cannot reach berth's admin socket %s (is the daemon running, and are you root?): %w", c.socket, op.Err)
		}
		return fmt.Errorf("berth admin socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("berth admin socket %s: read answer: %w", c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("berth answered %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return &Error{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("berth admin socket %s: decode answer: %w", c.socket, err)
	}
	return nil
}
