package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/nri"
	"github.com/berth-runtime/berth/sandbox"
)

// newNRI prepares NRI from the [nri] table; nil (no NRI) unless enabled.
// It is started, with the pods and containers it must know, by startNRI.
func newNRI(cfg *config.Config, log *slog.Logger) (*nri.NRI, error) {
	c := cfg.NRI
	if !c.Enable {
		return nil, nil
	}
	reg, err := duration(c.PluginRegistrationTimeout)
	if err != nil {
		return nil, fmt.Errorf("nri.plugin_registration_timeout: %w", err)
	}
	req, err := duration(c.PluginRequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("nri.plugin_request_timeout: %w", err)
	}
	return nri.New(nri.Config{
		SocketPath:          c.SocketPath,
		PluginPath:          c.PluginPath,
		PluginConfigPath:    c.PluginConfigPath,
		DisableConnections:  c.DisableConnections,
		RegistrationTimeout: reg,
		RequestTimeout:      req,
	}, log)
}

func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// startNRI starts NRI once pods and containers are loaded: plugins are
// synchronised with them.
func startNRI(n *nri.NRI, pods *sandbox.Manager, containers *container.Service) error {
	return n.Start(nriDomain{pods: pods, containers: containers})
}

// nriDomain is what NRI sees of berth.
type nriDomain struct {
	pods       *sandbox.Manager
	containers *container.Service
}

func (d nriDomain) PodSandboxes() []*api.PodSandbox      { return d.pods.NRIPods() }
func (d nriDomain) PodSandbox(id string) *api.PodSandbox { return d.pods.NRIPod(id) }
func (d nriDomain) Containers() []*api.Container         { return d.containers.NRIContainers() }
func (d nriDomain) UpdateContainer(ctx context.Context, u *api.ContainerUpdate) error {
	return d.containers.NRIUpdate(ctx, u)
}
func (d nriDomain) EvictContainer(ctx context.Context, e *api.ContainerEviction) error {
	return d.containers.NRIEvict(ctx, e)
}
