package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Manager runs several plugins.
type Manager struct {
	Plugins []*Plugin

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   []error
}

// Start checks the plugins' settings and runs them in the background until
// ctx ends or Stop is called.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil {
		return errors.New("deviceplugin: manager already started")
	}
	names := map[string]bool{}
	for _, p := range m.Plugins {
		c := p.settings()
		if err := c.defaults(); err != nil {
			return err
		}
		key := c.Dir + "\x00" + c.Socket
		if names[c.ResourceName] || names[key] {
			return fmt.Errorf("deviceplugin: %s or its socket %s configured twice", c.ResourceName, c.SocketPath())
		}
		names[c.ResourceName], names[key] = true, true
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.errs = nil
	for _, p := range m.Plugins {
		m.wg.Go(func() {
			if err := p.Run(ctx); err != nil {
				m.mu.Lock()
				m.errs = append(m.errs, err)
				m.mu.Unlock()
			}
		})
	}
	return nil
}

// Stop stops all plugins, waits for them and returns their errors.
func (m *Manager) Stop() error {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cancel = nil
	return errors.Join(m.errs...)
}

// Ready reports whether every plugin whose device is healthy is registered
// with the kubelet (plugins of absent or unusable devices stay
// unregistered and do not hold the node back, nor do Optional plugins).
func (m *Manager) Ready() bool {
	for _, p := range m.Plugins {
		if !p.Optional && p.Healthy() && !p.Registered() {
			return false
		}
	}
	return len(m.Plugins) > 0
}
