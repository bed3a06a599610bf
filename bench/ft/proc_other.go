//go:build !linux

package main

import "errors"

// killChild is only implemented on Linux, where the driver can check in
// /proc that the pid it kills is one of ftrun's ranks.
func killChild(parent, pid int) (int64, error) {
	return 0, errors.New("killing a rank is implemented on Linux only")
}
