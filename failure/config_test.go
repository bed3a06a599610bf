package failure

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

// Every preset is usable as it is and fills to itself.
func TestPresetsValidate(t *testing.T) {
	presets := map[string]Config{
		"LAN":            DefaultLANConfig(),
		"Default":        DefaultConfig(),
		"Local 2 on 2":   DefaultLocalConfig(2, 2),
		"Local 256 on 2": DefaultLocalConfig(256, 2),
		"Local 0 on 0":   DefaultLocalConfig(0, 0),
	}
	for name, c := range presets {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %+v.Validate() = %v", name, c, err)
		}
		if c.WithDefaults() != c {
			t.Errorf("%s: %+v has zero fields: fills to %+v", name, c, c.WithDefaults())
		}
	}
	if DefaultLocalConfig(2, 2) != DefaultLANConfig() {
		t.Errorf("one rank per CPU: %+v, want the LAN preset %+v", DefaultLocalConfig(2, 2), DefaultLANConfig())
	}
	if got := DefaultLocalConfig(256, 2); got.Timeout != 128*DefaultTimeout || got.Period != DefaultPeriod {
		t.Errorf("256 ranks on 2 CPUs: %+v, want Timeout %v", got, 128*DefaultTimeout)
	}
}

// A bad Config gets an error that names what is wrong and wraps ErrInvalid.
func TestConfigBadErrors(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Period: -ms}, "negative Period -1ms"},
		{Config{Timeout: -ms}, "negative Timeout -1ms"},
		{Config{Period: 50 * ms, Timeout: 40 * ms}, "Timeout 40ms does not exceed Period 50ms"},
		{Config{Timeout: 20 * ms}, "Timeout 20ms does not exceed Period 20ms"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("%+v.Validate() = %v, want an ErrInvalid naming %q", c.cfg, err, c.want)
		}
	}
}

func TestRanksPerCPU(t *testing.T) {
	for _, c := range []struct{ local, cpus, want int }{
		{1, 2, 1}, {2, 2, 1}, {3, 2, 2}, {4, 2, 2}, {5, 2, 3}, {256, 2, 128},
		{7, 8, 1}, {9, 8, 2}, {0, 2, 1}, {4, 0, 1}, {-1, -1, 1},
	} {
		if got := RanksPerCPU(c.local, c.cpus); got != c.want {
			t.Errorf("RanksPerCPU(%d, %d) = %d, want %d", c.local, c.cpus, got, c.want)
		}
	}
}

// ForHost stretches a default timeout (three periods where only Period is
// set) and keeps one asked for.
func TestForHost(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		cfg         Config
		local, cpus int
		want        time.Duration
	}{
		{Config{}, 1, 2, 60 * ms},
		{Config{}, 8, 2, 240 * ms},
		{Config{Period: 100 * ms}, 1, 2, 300 * ms},
		{Config{Period: 100 * ms}, 6, 2, 900 * ms},
		{Config{Period: 10 * ms}, 6, 2, 180 * ms}, // three periods is below the default
		{Config{Timeout: 500 * ms}, 256, 2, 500 * ms},
	} {
		got := c.cfg.ForHost(c.local, c.cpus)
		if got.Timeout != c.want || got.Period == 0 || got.ProbeWindow == 0 {
			t.Errorf("%+v.ForHost(%d, %d) = %+v, want Timeout %v and no zero field", c.cfg, c.local, c.cpus, got, c.want)
		}
	}
}
