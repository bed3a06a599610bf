package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// installer installs Debian packages with apt-get, running "apt-get update"
// once before the first install, one apt-get at a time (dpkg's lock). Its
// progress goes to log; installers made by with share the state but log
// elsewhere.
type installer struct {
	st  *aptState
	log io.Writer
}

type aptState struct {
	mu      sync.Mutex
	updated bool
}

func newInstaller(log io.Writer) *installer { return &installer{st: &aptState{}, log: log} }

// with returns an installer sharing in's state that logs to w.
func (in *installer) with(w io.Writer) *installer { return &installer{st: in.st, log: w} }

// aptTimeout bounds one apt-get command.
const aptTimeout = 10 * time.Minute

// ensureCommand returns the path of the command name, installing the Debian
// package pkg first when it is missing.
func (in *installer) ensureCommand(ctx context.Context, name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if err := in.install(ctx, pkg); err != nil {
		return "", fmt.Errorf("%s not found and installing %s failed: %w", name, pkg, err)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("apt-get installed %s but %s is still not on PATH", pkg, name)
	}
	return p, nil
}

// available reports whether apt knows a candidate version of pkg (after
// apt-get update).
func (in *installer) available(ctx context.Context, pkg string) bool {
	if _, err := exec.LookPath("apt-cache"); err != nil {
		return false
	}
	if err := in.update(ctx); err != nil {
		return false
	}
	out, err := runCmd(ctx, time.Minute, nil, "apt-cache", "policy", pkg)
	if err != nil {
		return false
	}
	return aptCandidate(string(out)) != ""
}

// aptCandidate returns the candidate version in apt-cache policy's output,
// or "" when there is none.
func aptCandidate(policy string) string {
	for _, line := range strings.Split(policy, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok {
			v = strings.TrimSpace(v)
			if v == "(none)" {
				return ""
			}
			return v
		}
	}
	return ""
}

func (in *installer) update(ctx context.Context) error {
	in.st.mu.Lock()
	defer in.st.mu.Unlock()
	if in.st.updated {
		return nil
	}
	if err := canApt(); err != nil {
		return err
	}
	fmt.Fprintln(in.log, "apt-get update")
	if _, err := runCmd(ctx, aptTimeout, aptEnv, "apt-get", "update", "-q"); err != nil {
		return err
	}
	in.st.updated = true
	return nil
}

var aptEnv = []string{"DEBIAN_FRONTEND=noninteractive"}

func canApt() error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("there is no apt-get to install it with")
	}
	if os.Geteuid() != 0 {
		return errors.New("installing needs root (apt-get)")
	}
	return nil
}

// install installs the Debian packages pkgs.
func (in *installer) install(ctx context.Context, pkgs ...string) error {
	if err := in.update(ctx); err != nil {
		return err
	}
	in.st.mu.Lock()
	defer in.st.mu.Unlock()
	fmt.Fprintf(in.log, "apt-get install -y %s\n", strings.Join(pkgs, " "))
	args := append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, pkgs...)
	_, err := runCmd(ctx, aptTimeout, aptEnv, args...)
	return err
}

// mavenJar fetches group:artifact:version from Maven Central with Maven
// (installing Maven and a Java runtime when missing), copies it into dir and
// returns its path. Maven verifies the checksums (--strict-checksums).
func mavenJar(ctx context.Context, in *installer, dir, gav string) (string, error) {
	mvn, err := in.ensureCommand(ctx, "mvn", "maven")
	if err != nil {
		return "", err
	}
	parts := strings.Split(gav, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("bad Maven coordinates %q", gav)
	}
	fmt.Fprintf(in.log, "mvn dependency:copy -Dartifact=%s\n", gav)
	out, err := runCmd(ctx, 5*time.Minute, nil, mvn, "-B", "-q", "--strict-checksums",
		"dependency:copy", "-Dartifact="+gav, "-DoutputDirectory="+dir, "-Dmdep.overWriteIfNewer=true")
	if err != nil {
		return "", err
	}
	jar := filepath.Join(dir, parts[1]+"-"+parts[2]+".jar")
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("mvn dependency:copy did not produce %s:\n%s", jar, tailString(out, 10))
	}
	return jar, nil
}

// debPackageOf returns the Debian package that installed the file at path
// (or, when dpkg does not know that path, the file a symbolic link there
// points to), or "" when dpkg knows neither.
func debPackageOf(ctx context.Context, path string) string {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return ""
	}
	paths := []string{path}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		paths = append(paths, real)
	}
	for _, p := range paths {
		if out, err := runCmd(ctx, 30*time.Second, nil, "dpkg-query", "-S", p); err == nil {
			if pkg := parseDpkgSearch(string(out)); pkg != "" {
				return pkg
			}
		}
	}
	return ""
}

// parseDpkgSearch picks the package out of dpkg-query -S's "pkg: /path" or
// "pkg:arch: /path".
func parseDpkgSearch(out string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	pkg, _, ok := strings.Cut(line, ": ")
	if !ok || strings.ContainsAny(pkg, " ,") || pkg == "dpkg-query" {
		return ""
	}
	pkg, _, _ = strings.Cut(pkg, ":")
	return pkg
}

// origin says where a command came from: "Debian's PKG" or "found at PATH".
func origin(ctx context.Context, path string) string {
	if pkg := debPackageOf(ctx, path); pkg != "" {
		return "Debian's " + pkg
	}
	return "found at " + path
}
