package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A minimal client for Redis's wire protocol (RESP 2): enough to SET, WAIT,
// GET, PING and read INFO. One respConn is one TCP connection and is used by
// one goroutine at a time.

// reply is one RESP 2 reply.
type reply struct {
	kind  byte // '+' simple string, '-' error, ':' integer, '$' bulk string, '*' array
	str   string
	n     int64
	bulk  []byte  // '$'; nil with null true for a null bulk string
	array []reply // '*'; nil with null true for a null array
	null  bool
}

// err returns the reply as an error when it is a Redis error reply.
func (r reply) err() error {
	if r.kind == '-' {
		return fmt.Errorf("redis: %s", r.str)
	}
	return nil
}

// maxBulk bounds a bulk string a reply may announce, so that a corrupt length
// cannot make the client allocate without limit.
const maxBulk = 512 << 20

// maxArray bounds the elements of one array reply.
const maxArray = 1 << 20

// appendCommand appends the RESP encoding of a command (an array of bulk
// strings) to buf.
func appendCommand(buf []byte, args ...[]byte) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// readReply reads one reply from r.
func readReply(r *bufio.Reader) (reply, error) {
	return readReplyDepth(r, 0)
}

func readReplyDepth(r *bufio.Reader, depth int) (reply, error) {
	if depth > 16 {
		return reply{}, errors.New("resp: arrays nested too deep")
	}
	line, err := readLine(r)
	if err != nil {
		return reply{}, err
	}
	if len(line) == 0 {
		return reply{}, errors.New("resp: empty line")
	}
	kind, rest := line[0], string(line[1:])
	switch kind {
	case '+', '-':
		return reply{kind: kind, str: rest}, nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("resp: bad integer %q", rest)
		}
		return reply{kind: kind, n: n}, nil
	case '$':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n < -1 || n > maxBulk {
			return reply{}, fmt.Errorf("resp: bad bulk length %q", rest)
		}
		if n == -1 {
			return reply{kind: kind, null: true}, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return reply{}, fmt.Errorf("resp: short bulk string: %w", err)
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return reply{}, errors.New("resp: bulk string not followed by CRLF")
		}
		return reply{kind: kind, bulk: b[:n:n]}, nil
	case '*':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n < -1 || n > maxArray {
			return reply{}, fmt.Errorf("resp: bad array length %q", rest)
		}
		if n == -1 {
			return reply{kind: kind, null: true}, nil
		}
		arr := make([]reply, 0, n)
		for range n {
			e, err := readReplyDepth(r, depth+1)
			if err != nil {
				return reply{}, err
			}
			arr = append(arr, e)
		}
		return reply{kind: kind, array: arr}, nil
	}
	return reply{}, fmt.Errorf("resp: unknown reply type %q", kind)
}

// readLine reads one CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, errors.New("resp: line too long")
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errors.New("resp: line not terminated by CRLF")
	}
	return line[:len(line)-2], nil
}

// respConn is one connection to a Redis server.
type respConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte // reused for encoding commands
}

func dialRESP(ctx context.Context, addr string) (*respConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &respConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (c *respConn) Close() error { return c.c.Close() }

// pipeline sends every command in one write and reads one reply per command.
// The context's deadline bounds the whole exchange; a connection whose
// exchange failed must not be used again.
func (c *respConn) pipeline(ctx context.Context, cmds ...[][]byte) ([]reply, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	c.c.SetDeadline(dl)
	c.buf = c.buf[:0]
	for _, cmd := range cmds {
		c.buf = appendCommand(c.buf, cmd...)
	}
	if _, err := c.c.Write(c.buf); err != nil {
		return nil, err
	}
	out := make([]reply, 0, len(cmds))
	for range cmds {
		rep, err := readReply(c.r)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// do sends one command and returns its reply; an error reply is returned as
// an error.
func (c *respConn) do(ctx context.Context, args ...string) (reply, error) {
	cmd := make([][]byte, len(args))
	for i, a := range args {
		cmd[i] = []byte(a)
	}
	reps, err := c.pipeline(ctx, cmd)
	if err != nil {
		return reply{}, err
	}
	return reps[0], reps[0].err()
}

// replicaStatus is what a primary's INFO replication says about its replicas.
type replicaStatus struct {
	role   string
	online int // replicas in state "online"
	total  int // connected_slaves
}

// parseReplicationInfo reads the output of INFO replication, whose lines
// look like
//
//	role:master
//	connected_slaves:2
//	slave0:ip=127.0.0.1,port=6380,state=online,offset=14,lag=0
func parseReplicationInfo(info string) replicaStatus {
	var st replicaStatus
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "role":
			st.role = v
		case k == "connected_slaves":
			st.total, _ = strconv.Atoi(v)
		case strings.HasPrefix(k, "slave") && k != "slave_read_only" && strings.Contains(v, "="):
			if _, err := strconv.Atoi(k[len("slave"):]); err != nil {
				continue
			}
			for _, kv := range strings.Split(v, ",") {
				if kv == "state=online" {
					st.online++
				}
			}
		}
	}
	return st
}
