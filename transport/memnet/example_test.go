package memnet_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ftrma/ftrma"
	"github.com/ftrma/ftrma/transport/memnet"
)

func Example() {
	ctx := context.Background()
	net := memnet.New(2)
	defer net.Close()
	a, b := net.Endpoint(0), net.Endpoint(1)

	mem := make([]byte, 64)
	key, _ := b.Register(mem)
	seq, err := a.Write(1, key, 0, []byte("hello"))
	if err == nil {
		err = a.Wait(ctx, 1, seq)
	}
	fmt.Println(string(mem[:5]), err)

	net.Crash(1)
	_, err = a.Write(1, key, 0, []byte("x"))
	fmt.Println(errors.Is(err, ftrma.ErrProcFailed))
	// Output:
	// hello <nil>
	// true
}
