package main

import (
	"os"

	"github.com/ftrma/ftrma/launcher"
)

func main() {
	os.Exit(launcher.Main(os.Args[1:], os.Stdout, os.Stderr))
}
