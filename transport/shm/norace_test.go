//go:build linux && !race

package shm

const raceBuild = false
