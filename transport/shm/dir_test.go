//go:build linux

package shm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ftrma/ftrma"
)

// randomJob is a job name no other test run uses.
func randomJob() string { return fmt.Sprintf("test%016x", rand.Uint64()) }

// Without Config.Dir, a job's files go to its own directory under
// /dev/shm, made mode 0700 by the first Open and removed by the last
// Close; RemoveJob removes it too.
func TestDefaultJobDir(t *testing.T) {
	if _, err := os.Stat(DefaultDir); err != nil {
		t.Skipf("NOT RUN: no %s", DefaultDir)
	}
	job := randomJob()
	dir := JobDir("", job)
	t.Cleanup(func() { RemoveJob("", job) })
	a := must(Open(Config{Rank: 0, Size: 2, Job: job}))
	b := must(Open(Config{Rank: 1, Size: 2, Job: job}))
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the job's directory: %v, %v; want a directory of mode 0700", fi, err)
	}
	if m, _ := filepath.Glob(filepath.Join(DefaultDir, "ftrma-"+job+"-*")); len(m) != 0 {
		t.Fatalf("files of the job outside its directory: %v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, ctlName(job, 1))); err != nil {
		t.Fatalf("rank 1's control segment is not in the job's directory: %v", err)
	}
	a.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the first Close removed the directory rank 1 still uses: %v", err)
	}
	b.Close()
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the last Close left the job's directory: %v", err)
	}

	// A killed job's files: RemoveJob removes them and the directory.
	must(Open(Config{Rank: 0, Size: 1, Job: job})) // never closed, as if killed
	if err := RemoveJob("", job); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("RemoveJob left the job's directory: %v", err)
	}
}

// A job directory that is not this user's private place is refused, with
// an error that names it and says what is wrong: one another user made
// first, a symbolic link, one others may write into, a file.
func TestOpenRefusesDirectoryNotPrivate(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	elsewhere := t.TempDir()
	cases := []struct {
		name, phrase string
		make         func(dir string) error
	}{
		{"another user's", "owned by uid 65534", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chown(dir, nobody, nobody)
		}},
		{"symbolic link", "symbolic link", func(dir string) error { return os.Symlink(elsewhere, dir) }},
		{"writable by others", "others may make files", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o1777)
		}},
		{"a file", "not a directory", func(dir string) error { return os.WriteFile(dir, nil, 0o600) }},
	}
	for i, c := range cases {
		dir := JobDir(base, fmt.Sprint("j", i))
		if err := c.make(dir); err != nil {
			t.Fatal(err)
		}
		tr, err := Open(Config{Size: 1, Job: "j", Dir: dir})
		if err == nil {
			tr.Close()
		}
		wantRefused(t, c.name, err, dir, c.phrase)
		if !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("%s: %v is not ftrma.ErrInvalid", c.name, err)
		}
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("Open made %s in the symbolic link's target", ents[0].Name())
	}
}

// OpenRanks lists the ranks whose transports are open, by their locks: a
// closed rank is not listed, nor a control segment no process holds (the
// file of a rank killed, as a stale job leaves it).
func TestOpenRanks(t *testing.T) {
	dir := t.TempDir()
	ts, _, _ := cluster(t, 3, clusterOpts{dir: dir, job: "j", skipCleanups: true})
	if open, err := OpenRanks(dir, "j"); err != nil || !slices.Equal(open, []ftrma.Rank{0, 1, 2}) {
		t.Fatalf("OpenRanks: %v, %v; want [0 1 2]", open, err)
	}
	ts[1].Close()
	if open, err := OpenRanks(dir, "j"); err != nil || !slices.Equal(open, []ftrma.Rank{0, 2}) {
		t.Fatalf("OpenRanks after rank 1 closed: %v, %v; want [0 2]", open, err)
	}
	// A control segment left by a dead rank: no lock.
	if err := os.WriteFile(filepath.Join(dir, ctlName("j", 1)), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if open, err := OpenRanks(dir, "j"); err != nil || !slices.Equal(open, []ftrma.Rank{0, 2}) {
		t.Fatalf("OpenRanks beside a stale control segment: %v, %v; want [0 2]", open, err)
	}
	ts[0].Close()
	ts[2].Close()
	if open, err := OpenRanks(dir, "j"); err != nil || len(open) != 0 {
		t.Fatalf("OpenRanks after every rank closed: %v, %v", open, err)
	}
	if open, err := OpenRanks(filepath.Join(dir, "missing"), "j"); err != nil || len(open) != 0 {
		t.Fatalf("OpenRanks of a missing directory: %v, %v", open, err)
	}
}
