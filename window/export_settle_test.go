package window

import "time"

// SettleWait exposes settleWait to the tests of package window_test.
func (w *Window) SettleWait() time.Duration { return w.settleWait() }
