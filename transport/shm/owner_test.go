//go:build linux

package shm

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
	"golang.org/x/sys/unix"
)

// nobody is the uid the tests give files that another local user made.
const nobody = 65534

// needRoot skips a test that chowns files to another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
}

// wantRefused fails the test unless err is non-nil and names path and each
// of the phrases.
func wantRefused(t *testing.T, what string, err error, path string, phrases ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	for _, s := range append([]string{path}, phrases...) {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: error %q does not say %q", what, err, s)
		}
	}
}

// Open refuses the names of its files when something is there already, of
// whatever kind: a file, a named pipe or a symbolic link another user could
// have made. Alloc refuses a data segment's name the same way.
func TestOpenRefusesPrecreatedFiles(t *testing.T) {
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ctlName("j", 0), ctlName("j", 0) + tmpSuffix, bellName("j", 0)} {
		for _, kind := range []string{"file", "symlink"} {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			if kind == "file" {
				if err := os.WriteFile(path, make([]byte, 4096), 0o666); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			tr, err := Open(Config{Size: 2, Job: "j", Dir: dir})
			if err == nil {
				tr.Close()
			}
			what := kind + " at " + name
			wantRefused(t, what, err, path)
			if !errors.Is(err, fs.ErrExist) {
				t.Fatalf("%s: %v is not fs.ErrExist", what, err)
			}
		}
	}

	dir := t.TempDir()
	tr := must(Open(Config{Size: 1, Job: "j", Dir: dir}))
	defer tr.Close()
	seg := filepath.Join(dir, segName("j", 0, 1))
	if err := os.Symlink(target, seg); err != nil {
		t.Fatal(err)
	}
	_, err := tr.Alloc(64)
	wantRefused(t, "Alloc over a symlink", err, seg)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Alloc over a symlink: %v is not fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(target); len(b) != 4096 {
		t.Fatalf("the symlink's target has %d bytes, want 4096 untouched", len(b))
	}
	// The next name is free: Alloc works again.
	if _, err := tr.Alloc(64); err != nil {
		t.Fatal(err)
	}
}

// A peer's control segment that is not this user's, or a symbolic link in
// its place, is never mapped: Connect fails naming the file.
func TestPeerControlSegmentMustBeOurs(t *testing.T) {
	for _, how := range []string{"chown", "symlink"} {
		t.Run(how, func(t *testing.T) {
			if how == "chown" {
				needRoot(t)
			}
			ts, _, _ := cluster(t, 2, clusterOpts{skipConnect: true})
			path := filepath.Join(ts[1].cfg.Dir, ctlName("t", 1))
			var phrase string
			switch how {
			case "chown":
				if err := os.Chown(path, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				phrase = "owned by uid 65534"
			case "symlink":
				moved := path + ".moved"
				if err := os.Rename(path, moved); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(moved, path); err != nil {
					t.Fatal(err)
				}
				phrase = "symbolic link"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := ts[0].Connect(ctx)
			wantRefused(t, "connect", err, path, phrase)
			if !errors.Is(err, ftrma.ErrInvalid) || !errors.Is(err, errNotOurs) {
				t.Fatalf("connect: %v is not ftrma.ErrInvalid and errNotOurs", err)
			}
			if ts[0].peers[1].ctl != nil {
				t.Fatal("the refused control segment was mapped")
			}
		})
	}
}

// A peer's data segment given to another user is never mapped: an
// operation on it fails naming the file, and the memory is not written.
func TestPeerDataSegmentMustBeOurs(t *testing.T) {
	needRoot(t)
	ts, _, _ := cluster(t, 2, clusterOpts{})
	mem := must(ts[1].Alloc(64))
	key := must(ts[1].Register(mem))
	path := filepath.Join(ts[1].cfg.Dir, segName("t", 1, 1))
	if err := os.Chown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	seq, err := ts[0].Write(1, key, 0, []byte{7})
	if err == nil {
		err = ts[0].Wait(testCtx(t), 1, seq)
	}
	wantRefused(t, "write", err, path, "owned by uid 65534")
	if !errors.Is(err, ftrma.ErrInvalid) {
		t.Fatalf("write: %v is not ftrma.ErrInvalid", err)
	}
	if mem[0] != 0 {
		t.Fatal("the write landed")
	}
}

// openOwned takes only a file of the kind asked for, of this user, and
// never follows a symbolic link.
func TestOpenOwned(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fd, err := openOwned(file, unix.O_RDONLY, unix.S_IFREG)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	for _, c := range []struct {
		path   string
		kind   int
		phrase string
	}{
		{link, unix.S_IFREG, "symbolic link"},
		{file, unix.S_IFIFO, "not a named pipe"},
		{pipe, unix.S_IFREG, "not a regular file"},
	} {
		fd, err := openOwned(c.path, unix.O_RDONLY|unix.O_NONBLOCK, c.kind)
		if err == nil {
			unix.Close(fd)
		}
		wantRefused(t, c.path, err, c.path, c.phrase)
		if !errors.Is(err, errNotOurs) {
			t.Fatalf("%s: %v is not errNotOurs", c.path, err)
		}
	}
	if _, err := openOwned(filepath.Join(dir, "none"), unix.O_RDONLY, unix.S_IFREG); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(file, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		_, err := openOwned(file, unix.O_RDONLY, unix.S_IFREG)
		wantRefused(t, "chowned file", err, file, "owned by uid 65534")
	}
}
