//go:build !linux

package steer

import (
	"context"
	"fmt"
	"syscall"

	"github.com/zerodrop/zerodrop/reuseport"
)

var errOS = fmt.Errorf("%w: reuseport steering needs Linux", reuseport.ErrNotSupported)

// Group is a handle on a steering group (Linux only).
type Group struct{}

// Member is a listener's slot in a group (Linux only).
type Member struct{}

// Join fails: steering needs Linux.
func (c *Config) Join(ctx context.Context, l syscall.Conn) (*Member, error) { return nil, errOS }

// Open fails: steering needs Linux.
func (c *Config) Open(ctx context.Context, address string) (*Group, error) { return nil, errOS }

// MarkDraining fails: steering needs Linux.
func (g *Group) MarkDraining(c syscall.Conn) error { return errOS }

// Close does nothing.
func (g *Group) Close() error { return nil }

// Close does nothing.
func (m *Member) Close() error { return nil }
