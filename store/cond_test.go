package store

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ftrma/ftrma"
)

func TestConditionalWrites(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		k := []byte("k")
		is := func(what string, got bool, err error, want bool) {
			t.Helper()
			if err != nil || got != want {
				t.Fatalf("%s: %v, %v; want %v", what, got, err, want)
			}
		}
		value := func(want string) {
			t.Helper()
			for _, s := range st {
				v, err := s.Get(ctx, k)
				if want == "" && !errors.Is(err, ErrNotFound) || want != "" && (err != nil || string(v) != want) {
					t.Fatalf("rank %d: get = %q, %v; want %q", s.me, v, err, want)
				}
			}
		}
		ok, err := st[0].PutIfAbsent(ctx, k, []byte("a"))
		is("put-if-absent of an absent key", ok, err, true)
		ok, err = st[1].PutIfAbsent(ctx, k, []byte("b"))
		is("put-if-absent of a present key", ok, err, false)
		value("a")
		ok, err = st[2].CompareAndSwap(ctx, k, []byte("x"), []byte("c"))
		is("compare-and-swap with the wrong old value", ok, err, false)
		ok, err = st[2].CompareAndSwap(ctx, k, []byte("a"), []byte("c"))
		is("compare-and-swap with the right old value", ok, err, true)
		value("c")
		ok, err = st[3].CompareAndSwap(ctx, k, nil, []byte("d"))
		is("compare-and-swap from absent of a present key", ok, err, false)

		v, ver, err := st[1].GetVersion(ctx, k)
		if err != nil || string(v) != "c" || ver == 0 {
			t.Fatalf("get-version: %q %d %v", v, ver, err)
		}
		ok, err = st[0].PutIfVersion(ctx, k, []byte("e"), ver+1)
		is("put-if-version with a wrong version", ok, err, false)
		ok, err = st[0].PutIfVersion(ctx, k, []byte("e"), ver)
		is("put-if-version with the version", ok, err, true)
		ok, err = st[0].PutIfVersion(ctx, k, []byte("f"), ver)
		is("put-if-version with the version before", ok, err, false)
		value("e")
		_, ver2, _ := st[2].GetVersion(ctx, k)
		if ver2 <= ver {
			t.Fatalf("version %d after %d", ver2, ver)
		}
		ok, err = st[3].DeleteIfVersion(ctx, k, ver)
		is("delete-if-version with an old version", ok, err, false)
		ok, err = st[3].DeleteIfVersion(ctx, k, ver2)
		is("delete-if-version with the version", ok, err, true)
		value("")
		ok, err = st[1].CompareAndSwap(ctx, k, []byte("e"), nil)
		is("delete-if-value of an absent key", ok, err, false)

		// Written again after the deletion: new versions, never one of
		// the old incarnation's.
		ok, err = st[2].PutIfVersion(ctx, k, []byte("g"), 0)
		is("put-if-version 0 (absent) of an absent key", ok, err, true)
		_, ver3, _ := st[0].GetVersion(ctx, k)
		if ver3 <= ver2 {
			t.Fatalf("version %d of the key written again, %d before its deletion", ver3, ver2)
		}
		ok, err = st[1].DeleteIfVersion(ctx, k, ver2)
		is("delete-if-version with the deleted incarnation's version", ok, err, false)
		ok, err = st[1].CompareAndSwap(ctx, k, []byte("g"), nil)
		is("delete if the value is g", ok, err, true)
		value("")

		if _, err := st[0].CompareAndSwap(ctx, nil, nil, []byte("x")); !errors.Is(err, ftrma.ErrInvalid) {
			t.Errorf("compare-and-swap of an empty key: %v", err)
		}
	})
}

// Counters incremented by compare-and-swap from every rank and several
// goroutines lose no increment: the check and the write are one.
func TestCompareAndSwapCounter(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, 2*time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		const per = 15
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for _, s := range st {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						for {
							v, err := s.Get(ctx, []byte("n"))
							var old []byte
							n := 0
							if err == nil {
								old = v
								n, _ = strconv.Atoi(string(v))
							} else if !errors.Is(err, ErrNotFound) {
								errs <- err
								return
							}
							ok, err := s.CompareAndSwap(ctx, []byte("n"), old, strconv.AppendInt(nil, int64(n+1), 10))
							if err != nil {
								errs <- err
								return
							}
							if ok {
								break
							}
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		v, err := st[0].Get(ctx, []byte("n"))
		if err != nil || string(v) != strconv.Itoa(8*per) {
			t.Fatalf("counter %q, %v; want %d", v, err, 8*per)
		}
	})
}

// A condition that fails on an absent key leaves no slot behind.
func TestFailedConditionFreesSlots(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	opt := smallOptions(2)
	opt.Slots = 8
	_, st := openAll(t, 3, opt)
	for i := range 100 {
		ok, err := st[i%3].CompareAndSwap(ctx, fmt.Appendf(nil, "absent-%d", i), []byte("x"), []byte("y"))
		if err != nil || ok {
			t.Fatalf("compare-and-swap %d of an absent key: %v %v", i, ok, err)
		}
	}
	for _, s := range st {
		if n := s.Stats().KeysHeld; n != 0 {
			t.Errorf("rank %d holds %d slots after failed conditions only", s.me, n)
		}
	}
}
