package main

import (
	"os"

	"github.com/ftrma/ftrma/launcher"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(launcher.RunAgent(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(launcher.Main(os.Args[1:], os.Stdout, os.Stderr))
}
