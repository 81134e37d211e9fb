package cgroup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"
)

// systemdPrivate is systemd's private D-Bus socket (root only): it sends
// every signal to each connection on it, with no bus daemon between and
// no Subscribe call needed.
const systemdPrivate = "/run/systemd/private"

// WatchReloads calls reloaded after each `systemctl daemon-reload` (or
// daemon-reexec) has finished, until ctx ends. Before 253 systemd has no
// OOMPolicy= for scopes and a reload writes memory.oom.group 0 over what
// the kubelet's unified map set (docs/cgroups.md): the caller writes it
// again. A connection that breaks is made again after a pause.
func WatchReloads(ctx context.Context, log *slog.Logger, reloaded func(context.Context)) {
	for ctx.Err() == nil {
		if err := watchReloadsOnce(ctx, reloaded); err != nil && ctx.Err() == nil {
			log.Warn("watching systemd's reloads; trying again in 5s", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

func watchReloadsOnce(ctx context.Context, reloaded func(context.Context)) error {
	conn, err := dbus.Dial("unix:path="+systemdPrivate, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", systemdPrivate, err)
	}
	defer conn.Close()
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		return fmt.Errorf("authenticate on %s: %w", systemdPrivate, err)
	}
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)
	defer conn.RemoveSignal(signals)
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig, ok := <-signals:
			if !ok {
				return fmt.Errorf("%s closed", systemdPrivate)
			}
			// Reloading(true) before, Reloading(false) once done.
			if sig.Name == "org.freedesktop.systemd1.Manager.Reloading" && len(sig.Body) == 1 && sig.Body[0] == false {
				reloaded(ctx)
			}
		}
	}
}
