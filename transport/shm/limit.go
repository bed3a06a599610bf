//go:build linux

package shm

import "github.com/ftrma/ftrma/transport"

var _ transport.RegionLimiter = (*Transport)(nil)

// RegionLimit is the size of this rank's key table (Config.Regions): how many
// regions it may have registered at once.
func (t *Transport) RegionLimit() int { return t.cfg.Regions }
