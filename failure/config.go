package failure

import (
	"fmt"
	"time"

	"github.com/ftrma/ftrma"
)

// The defaults of Config, from DESIGN.md: five times faster than ULFM's
// 100 ms / 300 ms, which a job on one switch or one host affords.
const (
	DefaultPeriod  = 20 * time.Millisecond
	DefaultTimeout = 60 * time.Millisecond
)

// DefaultProbeWindow is the default of Config.ProbeWindow: enough for every
// rank of a typical host (or of a switch's worth of a link cut) to be found
// in one probe round.
const DefaultProbeWindow = 8

// Config sets the detector's timing. The zero Config is the default one
// (DefaultLANConfig); WithDefaults fills a Config and Validate checks it.
//
// With Tick called every h (at most Period/2) and heartbeats delayed between
// dmin and dmax on the way, a live rank is never suspected as long as
// Period + h + (dmax - dmin) < Timeout and failure notices reach every rank
// within Timeout - dmax of their origin; a silent rank is suspected within
// Timeout + h of the last heartbeat its observer heard. Probes (see
// ProbeWindow) add one condition: a probe and its answer together must take
// less than Timeout, delays and the probed rank's own stalls included.
type Config struct {
	// Period is the interval between two heartbeats a rank sends to its
	// observer. Zero means DefaultPeriod (20 ms).
	Period time.Duration
	// Timeout is how long an observer tolerates silence from the rank it
	// watches before it declares that rank failed. Zero means
	// DefaultTimeout (60 ms), or TimeoutPeriods (3) Periods where that is
	// longer; ForHost stretches a zero Timeout by the ranks per CPU. It must
	// exceed Period; twice Period or more leaves room for delay jitter and
	// late ticks.
	Timeout time.Duration
	// AwaitConfirmation makes a suspicion a report, not a verdict: the
	// detector reports the silent observed rank once (Ready.Suspected) and
	// goes on watching it, without closing the ring over it, until Failed
	// confirms the failure (ftrun's: it kills the suspect, or waits out
	// the suspect's lease) or a heartbeat from the rank refutes it; while
	// the rank stays silent it is reported again every 4 Timeouts (the
	// confirmer may have found it slow, not failed, and wait for more). Every
	// rank learns of a confirmed failure together, so the ring closes the
	// same way everywhere; without it a rank that moved on alone would
	// watch a predecessor that still sends its heartbeats elsewhere, and
	// suspect one healthy rank after another.
	AwaitConfirmation bool
	// ProbeWindow is how many ranks beyond a suspect the detector probes at
	// once. When it suspects the rank it watches, it sends a probe to each of
	// the next ProbeWindow predecessors not known to have failed (stopping
	// at self) and suspects each that has not answered Timeout after the
	// probe, up to the nearest one that answers: a block of k consecutive
	// dead ranks is found in about two Timeouts when k <= ProbeWindow+1,
	// instead of one Timeout per rank. Zero means DefaultProbeWindow (8); a
	// negative value turns probing off (consecutive dead ranks are then found
	// one Timeout each).
	ProbeWindow int
}

// TimeoutPeriods is how many Periods the default Timeout spans at least when
// only Period is set: a lost heartbeat or two is no failure.
const TimeoutPeriods = 3

// The presets. Each builds on DefaultLANConfig, and says why it differs.
// They are the one home of the detector's settings: ftrun (launcher), a
// rank's start-up (startup) and comm all take their numbers from here.

// DefaultLANConfig returns the default timing, every field spelled out: for
// ranks on hosts joined by one switch (InfiniBand or Ethernet), each rank
// with a CPU of its own. It is also the timing of a rank on one host that
// has a CPU of its own (DefaultLocalConfig with no more ranks than CPUs).
func DefaultLANConfig() Config {
	return Config{Period: DefaultPeriod, Timeout: DefaultTimeout, ProbeWindow: DefaultProbeWindow}
}

// DefaultLocalConfig returns the timing for a rank on a host where
// localRanks ranks of its job share cpus CPUs: DefaultLANConfig, with
// Timeout multiplied by RanksPerCPU(localRanks, cpus). Where ranks outnumber
// CPUs a runnable rank waits for a CPU for about that many time slices, and
// 60 ms of silence is then no sign of failure. With one rank per CPU or
// fewer it equals DefaultLANConfig.
func DefaultLocalConfig(localRanks, cpus int) Config {
	return Config{}.ForHost(localRanks, cpus)
}

// DefaultConfig returns DefaultLANConfig().
func DefaultConfig() Config { return DefaultLANConfig() }

// RanksPerCPU is the one rule by which CPU sharing stretches timeouts: the
// ranks per CPU of a host where localRanks ranks of a job run on cpus CPUs,
// rounded up, and 1 when there are no more ranks than CPUs (or either count
// is below 1). The detector's default timeout (ForHost) and ftrun's host
// layer (its link timeouts and the ranks' lease) stretch by it.
func RanksPerCPU(localRanks, cpus int) int {
	if localRanks < 1 || cpus < 1 {
		return 1
	}
	return max(1, (localRanks+cpus-1)/cpus)
}

// WithDefaults returns c with every zero field replaced by its default, as
// the detector reads it: Period DefaultPeriod; Timeout DefaultTimeout, or
// TimeoutPeriods Periods where that is longer (a Period set without a
// Timeout); ProbeWindow DefaultProbeWindow. It does not validate: see
// Validate.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = max(DefaultTimeout, TimeoutPeriods*c.Period)
	}
	if c.Period == 0 {
		c.Period = DefaultPeriod
	}
	if c.ProbeWindow == 0 {
		c.ProbeWindow = DefaultProbeWindow
	}
	return c
}

// ForHost returns c with its defaults filled (WithDefaults) for a rank on a
// host where localRanks ranks of its job share cpus CPUs: a Timeout left
// zero (a default) is multiplied by RanksPerCPU(localRanks, cpus); a Timeout
// set is kept as asked.
func (c Config) ForHost(localRanks, cpus int) Config {
	stretch := c.Timeout == 0
	c = c.WithDefaults()
	if stretch {
		c.Timeout *= time.Duration(RanksPerCPU(localRanks, cpus))
	}
	return c
}

// Validate reports whether c, with its defaults applied, is usable: both
// durations positive and Timeout greater than Period (a detector whose
// timeout a single period of silence exceeds suspects healthy ranks). The
// error names the fields and wraps ftrma.ErrInvalid.
func (c Config) Validate() error {
	if c.Period < 0 {
		return fmt.Errorf("failure: negative Period %v: %w", c.Period, ftrma.ErrInvalid)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("failure: negative Timeout %v: %w", c.Timeout, ftrma.ErrInvalid)
	}
	d := c.WithDefaults()
	if d.Timeout <= d.Period {
		return fmt.Errorf("failure: Timeout %v does not exceed Period %v: %w", d.Timeout, d.Period, ftrma.ErrInvalid)
	}
	return nil
}
