package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// clientOptions are the flags of the client commands.
type clientOptions struct {
	socket  string
	timeout time.Duration
}

// clientSynopsis is each client command's help text.
var clientSynopsis = map[string]string{
	"put": `usage: ftkv put --socket PATH KEY VALUE

Stores VALUE under KEY in the store served at PATH (any rank's socket); with
VALUE -, the value is read from stdin. It returns when every live replica
holds the value. A VALUE that starts with - other than - itself goes after
--: ftkv put --socket PATH -- KEY -1`,
	"get": `usage: ftkv get --socket PATH KEY

Prints KEY's value, raw (no newline added), to stdout. A missing key exits 1
with "not found" on stderr.`,
	"del": `usage: ftkv del --socket PATH KEY

Deletes KEY; deleting a missing key is not an error.`,
	"stop": `usage: ftkv stop --socket PATH

Stops every rank of the serving job (through any rank's socket), and waits
until PATH is removed.`,
}

// clientArgs is the number of arguments of each client command.
var clientArgs = map[string]int{"put": 2, "get": 1, "del": 1, "stop": 0}

func clientFlags(op string, o *clientOptions) *flag.FlagSet {
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.StringVar(&o.socket, "socket", "", "the serving job's Unix socket `PATH` (rank 0's, or PATH.r for rank r); required")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	return fs
}

func (o *clientOptions) validate(op string, args []string) error {
	switch {
	case o.socket == "":
		return errors.New("--socket PATH is required")
	case o.timeout <= 0:
		return fmt.Errorf("--timeout must be positive (got %v)", o.timeout)
	case len(args) != clientArgs[op]:
		return fmt.Errorf("want %s, got %d arguments", map[string]string{"put": "KEY VALUE", "get": "KEY", "del": "KEY", "stop": "no arguments"}[op], len(args))
	case clientArgs[op] > 0 && args[0] == "":
		return errors.New("the key must not be empty")
	case clientArgs[op] > 0 && len(args[0]) > maxKey:
		return fmt.Errorf("the key is %d bytes, at most %d", len(args[0]), maxKey)
	}
	return nil
}

// runClient runs client command op (put, get, del, stop).
func runClient(op string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o clientOptions
	rest, code, done := parseFlags(clientFlags(op, &o), args, clientSynopsis[op], stdout, stderr)
	if done {
		return code
	}
	if err := o.validate(op, rest); err != nil {
		return usageError(stderr, op, err)
	}
	req := message{code: map[string]byte{"put": reqPut, "get": reqGet, "del": reqDel, "stop": reqStop}[op]}
	if len(rest) > 0 {
		req.fields = append(req.fields, []byte(rest[0]))
	}
	if op == "put" {
		v := []byte(rest[1])
		if rest[1] == "-" {
			var err error
			if v, err = io.ReadAll(io.LimitReader(stdin, maxValueLimit+1)); err != nil {
				fmt.Fprintf(stderr, "ftkv put: reading the value from stdin: %v\n", err)
				return 1
			}
			if len(v) > maxValueLimit {
				fmt.Fprintf(stderr, "ftkv put: the value on stdin is over %d bytes\n", maxValueLimit)
				return 1
			}
		}
		req.fields = append(req.fields, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	rep, err := call(ctx, o.socket, req)
	if err == nil {
		err = checkReply(req.code, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ftkv %s: %v\n", op, err)
		return 1
	}
	switch rep.code {
	case statusNotFound:
		fmt.Fprintf(stderr, "ftkv get: %q: not found\n", rest[0])
		return 1
	case statusError:
		fmt.Fprintf(stderr, "ftkv %s: the server says: %s\n", op, rep.fields[0])
		return 1
	}
	switch op {
	case "get":
		if _, err := stdout.Write(rep.fields[0]); err != nil {
			fmt.Fprintf(stderr, "ftkv get: %v\n", err)
			return 1
		}
	case "stop":
		if err := waitGone(ctx, o.socket); err != nil {
			fmt.Fprintf(stderr, "ftkv stop: the server accepted the stop, but %v\n", err)
			return 1
		}
	}
	return 0
}

// call sends req to the server at path and returns its reply, within ctx.
func call(ctx context.Context, path string, req message) (message, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return message{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	_, werr := conn.Write(appendFrame(nil, req))
	// Even when the write failed, the server may have answered why (a
	// request over its limit is answered and the connection closed).
	rep, err := readFrame(conn, frameOverhead+maxKey+maxValueLimit)
	switch {
	case err == nil:
		return rep, nil
	case werr != nil:
		return message{}, fmt.Errorf("sending the request: %w", werr)
	case err == io.EOF:
		return message{}, errors.New("the server closed the connection without answering")
	}
	return message{}, fmt.Errorf("reading the reply: %w", err)
}

// waitGone waits until the socket at path is removed.
func waitGone(ctx context.Context, path string) error {
	for {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still there", path)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
