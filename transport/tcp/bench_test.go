package tcp

import (
	"context"
	"fmt"
	"testing"
)

// sealName names a SealMode in benchmark names.
var sealName = map[SealMode]string{SealRemote: "plain", SealAll: "sealed", SealNone: "none"}

// BenchmarkWriteFlush measures a write and its flush between two transports
// of this process (both sides share one Go runtime, unlike a real job),
// over a plain connection (loopback's default) and a sealed one (SealAll).
func BenchmarkWriteFlush(b *testing.B) {
	for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		for _, seal := range []SealMode{SealRemote, SealAll} {
			b.Run(fmt.Sprintf("%d/%s", size, sealName[seal]), func(b *testing.B) {
				ts, _ := clusterSealed(b, 2, 0, seal)
				defer ts[0].Close()
				defer ts[1].Close()
				key, _ := ts[1].Register(words(size))
				src := make([]byte, size)
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ts[0].Write(1, key, 0, src); err != nil {
						b.Fatal(err)
					}
					if err := ts[0].Flush(ctx, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReadFlush measures a read and its flush, as BenchmarkWriteFlush.
// Reads above readAhead post their later pieces as earlier ones complete.
func BenchmarkReadFlush(b *testing.B) {
	for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		for _, seal := range []SealMode{SealRemote, SealAll} {
			b.Run(fmt.Sprintf("%d/%s", size, sealName[seal]), func(b *testing.B) {
				ts, _ := clusterSealed(b, 2, 0, seal)
				defer ts[0].Close()
				defer ts[1].Close()
				key, _ := ts[1].Register(words(size))
				dst := make([]byte, size)
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ts[0].Read(1, key, 0, dst); err != nil {
						b.Fatal(err)
					}
					if err := ts[0].Flush(ctx, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
