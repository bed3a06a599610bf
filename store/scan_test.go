package store

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestScanAndLen(t *testing.T) {
	bothWorlds(t, func(t *testing.T, newWorld worldFunc) {
		ctx := testCtx(t, time.Minute)
		_, st := openAllOn(t, newWorld, 4, smallOptions(3))
		var want []string
		for i := range 40 {
			k := fmt.Sprintf("a/%02d", i)
			if i%5 == 0 {
				k = fmt.Sprintf("b/%02d", i)
			}
			if err := st[i%4].Put(ctx, []byte(k), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if i%7 == 3 {
				if err := st[(i+1)%4].Delete(ctx, []byte(k)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if k[0] == 'a' {
				want = append(want, k)
			}
		}
		// A transaction's decision key exists now; it is not listed.
		tx := st[2].Begin()
		tx.Put([]byte("b/tx"), []byte("v"))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		keys, more, err := st[1].Scan(ctx, []byte("a/"), nil, 0)
		if err != nil || more {
			t.Fatalf("scan: more %v, %v", more, err)
		}
		if got := strs(keys); !slices.Equal(got, want) {
			t.Fatalf("scan a/ = %v\nwant %v", got, want)
		}
		// In pages of 7.
		var paged []string
		var after []byte
		for pages := 0; ; pages++ {
			keys, more, err := st[3].Scan(ctx, []byte("a/"), after, 7)
			if err != nil || len(keys) > 7 || pages > 10 {
				t.Fatalf("page %d: %d keys, %v", pages, len(keys), err)
			}
			paged = append(paged, strs(keys)...)
			if !more {
				break
			}
			after = keys[len(keys)-1]
		}
		if !slices.Equal(paged, want) {
			t.Fatalf("pages = %v\nwant %v", paged, want)
		}
		n, err := st[0].Len(ctx)
		total := len(want) + 1 // b/tx
		for i := 0; i < 40; i += 5 {
			if i%7 != 3 {
				total++
			}
		}
		if err != nil || n != total {
			t.Fatalf("len %d, %v; want %d", n, err, total)
		}
	})
}

// A crashed rank's keys are still listed, from their other replicas.
func TestScanAfterACrash(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	world, st := openAll(t, 4, smallOptions(2))
	for i := range 30 {
		if err := st[i%4].Put(ctx, fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	world.Net.Crash(2)
	for !st[0].current().c.ProcFailed(2) {
		time.Sleep(time.Millisecond)
	}
	if n, err := st[0].Len(ctx); err != nil || n != 30 {
		t.Fatalf("len after a crash: %d, %v", n, err)
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
