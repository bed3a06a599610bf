package tcp

import (
	"context"
	"fmt"
	"testing"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport"
)

// sealName names a SealMode in benchmark names.
var sealName = map[SealMode]string{SealRemote: "plain", SealAll: "sealed", SealNone: "none"}

// benchFlush measures op toward rank 1 and its flush, between two
// transports of this process (both sides share one Go runtime, unlike a
// real job), over a plain connection (loopback's default) and a sealed one
// (SealAll), for each size.
func benchFlush(b *testing.B, op func(t *Transport, key transport.Key, buf []byte) (transport.Seq, error)) {
	for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		for _, seal := range []SealMode{SealRemote, SealAll} {
			b.Run(fmt.Sprintf("%d/%s", size, sealName[seal]), func(b *testing.B) {
				ts, _ := clusterSealed(b, 2, 0, seal)
				defer ts[0].Close()
				defer ts[1].Close()
				key, _ := ts[1].Register(words(size))
				buf := make([]byte, size)
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := op(ts[0], key, buf); err != nil {
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

// BenchmarkWriteFlush measures a write and its flush.
func BenchmarkWriteFlush(b *testing.B) {
	benchFlush(b, func(t *Transport, key transport.Key, buf []byte) (transport.Seq, error) {
		return t.Write(ftrma.Rank(1), key, 0, buf)
	})
}

// BenchmarkReadFlush measures a read and its flush. Reads above readAhead
// post their later pieces as earlier ones complete.
func BenchmarkReadFlush(b *testing.B) {
	benchFlush(b, func(t *Transport, key transport.Key, buf []byte) (transport.Seq, error) {
		return t.Read(ftrma.Rank(1), key, 0, buf)
	})
}
