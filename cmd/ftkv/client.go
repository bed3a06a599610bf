package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// clientOptions are the flags of the client commands.
type clientOptions struct {
	socket  string
	timeout time.Duration

	ifAbsent  bool        // put --if-absent
	ifVersion versionFlag // put and del --if-version
	version   bool        // get --version
	limit     int         // ls --limit; 0 means all
	after     string      // ls --after, as given (keyArg)
	delete    bool        // cas --delete
}

// versionFlag is --if-version: a key's version (ftkv get --version).
type versionFlag struct {
	v   uint64
	set bool // given on the command line
}

func (f *versionFlag) String() string { return strconv.FormatUint(f.v, 10) }

func (f *versionFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a version (a non-negative integer)", s)
	}
	f.v, f.set = v, true
	return nil
}

// keyRule is how ls prints keys, and how the arguments that take one of its
// lines (--after, PREFIX) read them.
const keyRule = `A key is printed as it is when it is valid UTF-8 made of printable characters
(letters, marks, numbers, punctuation, symbols, the ASCII space: no tabs, no
newlines, no control characters) that does not start with a double quote;
any other key is printed as a Go-quoted string (strconv.Quote: "a\x00b\n").
--after and PREFIX take either form: an argument that starts with a double
quote is unquoted (strconv.Unquote), so any line of ls can be passed back.`

// clientSynopsis is each client command's help text.
var clientSynopsis = map[string]string{
	"put": `usage: ftkv put --socket PATH [--if-absent | --if-version N] KEY VALUE

Stores VALUE under KEY in the store served at PATH (any rank's socket); with
VALUE -, the value is read from stdin. It returns when every live replica
holds the value. A VALUE that starts with - other than - itself goes after
--: ftkv put --socket PATH -- KEY -1

With --if-absent, the value is stored only if KEY has no value; with
--if-version N, only if KEY's version (ftkv get --version) is N (0: only if
KEY has no value). When the condition does not hold, nothing changes and ftkv
exits 1 with "not stored" on stderr. Each is linearizable like a put.`,
	"get": `usage: ftkv get --socket PATH [--version] KEY

Prints KEY's value, raw (no newline added), to stdout. A missing key exits 1
with "not found" on stderr. With --version, the value is preceded by its
version — a decimal number that names this value of KEY, for put and del
--if-version — and a tab: everything up to the first tab is the version,
everything after it the value, byte for byte.`,
	"del": `usage: ftkv del --socket PATH [--if-version N] KEY

Deletes KEY; deleting a missing key is not an error. With --if-version N
(at least 1), KEY is deleted only if its version (ftkv get --version) is N;
otherwise nothing changes and ftkv exits 1 with "not deleted" on stderr.`,
	"cas": `usage: ftkv cas --socket PATH KEY OLD NEW
       ftkv cas --socket PATH --delete KEY OLD

Compare and swap: sets KEY to NEW (with --delete: deletes KEY) if KEY's value
is OLD, atomically (linearizable like a put). OLD - means "KEY has no value"
(put if absent); NEW - reads the new value from stdin, as put does. Prints
"swapped" and exits 0, or prints "not swapped" (nothing changed) and exits 1.
The one-byte value "-" cannot be given as OLD: use get --version and put
--if-version instead.`,
	"ls": `usage: ftkv ls --socket PATH [--limit N] [--after KEY] [PREFIX]

Lists the keys that start with PREFIX (all keys without one), one a line, in
byte order. With --limit N, prints at most N keys, and when more follow, a
last line on stderr that tells how to continue (--after the last key
printed; the exit status is 0). With --after KEY, starts after KEY. The
server answers a page of keys at a time; ls asks for pages until done. A
listing is not a snapshot: a key put or deleted meanwhile may or may not be
listed. A PREFIX that starts with - goes after --.

` + keyRule,
	"len": `usage: ftkv len --socket PATH

Prints the number of keys that have a value (a count, not a snapshot: keys
put or deleted meanwhile may or may not be counted).`,
	"snapshot": `usage: ftkv snapshot --socket PATH

Writes a snapshot of the whole store under the serving job's snapshot
directory (ftkv serve --snapshot-dir or --restore), through any rank's
socket: every write acknowledged before the request is in it. Prints its
directory, its cut and its number of keys. A job started with
"ftkv serve --restore DIR" starts from the newest complete one. A snapshot
that takes longer than the server's --request-timeout is reported as not
finished in time, and completes all the same.`,
	"stop": `usage: ftkv stop --socket PATH

Stops every rank of the serving job (through any rank's socket), and waits
until PATH is removed.`,
}

// clientArgs names the arguments of each client command, for messages.
var clientArgs = map[string]string{
	"put": "KEY VALUE", "get": "KEY", "del": "KEY", "stop": "no arguments", "snapshot": "no arguments",
	"len": "no arguments", "ls": "at most a PREFIX", "cas": "KEY OLD NEW (with --delete: KEY OLD)",
}

func clientFlags(op string, o *clientOptions) *flag.FlagSet {
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.StringVar(&o.socket, "socket", "", "the serving job's Unix socket `PATH` (rank 0's, or PATH.r for rank r); required")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	switch op {
	case "put":
		fs.BoolVar(&o.ifAbsent, "if-absent", false, "store only if KEY has no value")
		fs.Var(&o.ifVersion, "if-version", "store only if KEY's version is `N` (0: KEY has no value)")
	case "get":
		fs.BoolVar(&o.version, "version", false, "print KEY's version and a tab before the value")
	case "del":
		fs.Var(&o.ifVersion, "if-version", "delete only if KEY's version is `N` (at least 1)")
	case "ls":
		fs.IntVar(&o.limit, "limit", 0, "print at most `N` keys (0: all)")
		fs.StringVar(&o.after, "after", "", "list the keys after `KEY` (a line of ls)")
	case "cas":
		fs.BoolVar(&o.delete, "delete", false, "delete KEY if its value is OLD (no NEW)")
	}
	return fs
}

func (o *clientOptions) validate(op string, args []string) error {
	switch {
	case o.socket == "":
		return errors.New("--socket PATH is required")
	case o.timeout <= 0:
		return fmt.Errorf("--timeout must be positive (got %v)", o.timeout)
	}
	want := map[string]int{"put": 2, "get": 1, "del": 1, "stop": 0, "len": 0, "cas": 3, "snapshot": 0}[op]
	switch {
	case op == "cas" && o.delete:
		want = 2
	case op == "ls":
		want = min(len(args), 1)
	}
	if len(args) != want {
		return fmt.Errorf("want %s, got %d arguments", clientArgs[op], len(args))
	}
	switch op {
	case "put", "get", "del", "cas":
		if args[0] == "" {
			return errors.New("the key must not be empty")
		}
		if len(args[0]) > maxKey {
			return fmt.Errorf("the key is %d bytes, at most %d", len(args[0]), maxKey)
		}
	}
	switch {
	case op == "put" && o.ifAbsent && o.ifVersion.set:
		return errors.New("--if-absent and --if-version exclude each other")
	case op == "del" && o.ifVersion.set && o.ifVersion.v == 0:
		return errors.New("--if-version must be at least 1 (no key has version 0)")
	case op == "cas" && o.delete && args[1] == "-":
		return errors.New("--delete with OLD - (no value) would delete nothing")
	case op == "ls" && o.limit < 0:
		return fmt.Errorf("--limit must not be negative (got %d)", o.limit)
	}
	return nil
}

// runClient runs client command op (put, get, del, cas, ls, len, snapshot,
// stop).
func runClient(op string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o clientOptions
	rest, code, done := parseFlags(clientFlags(op, &o), args, clientSynopsis[op], stdout, stderr)
	if done {
		return code
	}
	if err := o.validate(op, rest); err != nil {
		return usageError(stderr, op, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if op == "ls" {
		return runList(ctx, o, rest, stdout, stderr)
	}
	req, err := clientRequest(op, o, rest, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "ftkv %s: %v\n", op, err)
		return 1
	}
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
	case statusFailed:
		switch {
		case op == "cas":
			fmt.Fprintln(stdout, "not swapped")
		case o.ifAbsent:
			fmt.Fprintf(stderr, "ftkv put: not stored: %q has a value\n", rest[0])
		case op == "put" && o.ifVersion.v == 0:
			fmt.Fprintf(stderr, "ftkv put: not stored: %q has a value (--if-version 0)\n", rest[0])
		case op == "put":
			fmt.Fprintf(stderr, "ftkv put: not stored: %q is not at version %d\n", rest[0], o.ifVersion.v)
		default:
			fmt.Fprintf(stderr, "ftkv del: not deleted: %q is not at version %d\n", rest[0], o.ifVersion.v)
		}
		return 1
	}
	var werr error
	switch op {
	case "get":
		v := rep.fields[0]
		if o.version {
			_, werr = fmt.Fprintf(stdout, "%d\t", binary.BigEndian.Uint64(rep.fields[0]))
			v = rep.fields[1]
		}
		if werr == nil {
			_, werr = stdout.Write(v)
		}
	case "len":
		_, werr = fmt.Fprintln(stdout, binary.BigEndian.Uint64(rep.fields[0]))
	case "cas":
		_, werr = fmt.Fprintln(stdout, "swapped")
	case "snapshot":
		_, werr = fmt.Fprintf(stdout, "snapshot %s: cut %d, %d keys\n", rep.fields[0], binary.BigEndian.Uint64(rep.fields[1]), binary.BigEndian.Uint64(rep.fields[2]))
	case "stop":
		if err := waitGone(ctx, o.socket); err != nil {
			fmt.Fprintf(stderr, "ftkv stop: the server accepted the stop, but %v\n", err)
			return 1
		}
	}
	if werr != nil {
		fmt.Fprintf(stderr, "ftkv %s: %v\n", op, werr)
		return 1
	}
	return 0
}

// clientRequest is the request of client command op (not ls) with options o
// and arguments args, checked by validate. Only reading stdin can fail.
func clientRequest(op string, o clientOptions, args []string, stdin io.Reader) (message, error) {
	switch op {
	case "stop":
		return message{code: reqStop}, nil
	case "snapshot":
		return message{code: reqSnapshot}, nil
	case "len":
		return message{code: reqLen}, nil
	}
	key := []byte(args[0])
	switch op {
	case "get":
		if o.version {
			return message{code: reqGetVersion, fields: [][]byte{key}}, nil
		}
		return message{code: reqGet, fields: [][]byte{key}}, nil
	case "del":
		if o.ifVersion.set {
			return message{code: reqDelIfVersion, fields: [][]byte{key, u64(o.ifVersion.v)}}, nil
		}
		return message{code: reqDel, fields: [][]byte{key}}, nil
	case "put":
		v, err := readValue(args[1], stdin)
		switch {
		case err != nil:
			return message{}, err
		case o.ifAbsent:
			return message{code: reqCAS, fields: [][]byte{key, {casOldAbsent}, {}, v}}, nil
		case o.ifVersion.set:
			return message{code: reqPutIfVersion, fields: [][]byte{key, u64(o.ifVersion.v), v}}, nil
		}
		return message{code: reqPut, fields: [][]byte{key, v}}, nil
	}
	// cas
	flags, oldV, newV := byte(0), []byte(args[1]), []byte{}
	if args[1] == "-" {
		flags, oldV = flags|casOldAbsent, []byte{}
	}
	if o.delete {
		flags |= casDelete
	} else {
		var err error
		if newV, err = readValue(args[2], stdin); err != nil {
			return message{}, err
		}
	}
	return message{code: reqCAS, fields: [][]byte{key, {flags}, oldV, newV}}, nil
}

// readValue returns the value argument arg: itself, or stdin's bytes for -.
func readValue(arg string, stdin io.Reader) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	v, err := io.ReadAll(io.LimitReader(stdin, maxValueLimit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value from stdin: %w", err)
	}
	if len(v) > maxValueLimit {
		return nil, fmt.Errorf("the value on stdin is over %d bytes", maxValueLimit)
	}
	return v, nil
}

// runList is ls: it asks for pages of keys on one connection and prints
// them, until the keys or --limit run out.
func runList(ctx context.Context, o clientOptions, args []string, stdout, stderr io.Writer) int {
	var prefix, after []byte
	var err error
	if len(args) > 0 {
		if prefix, err = keyArg(args[0]); err != nil {
			return usageError(stderr, "ls", fmt.Errorf("PREFIX: %w", err))
		}
	}
	if after, err = keyArg(o.after); err != nil {
		return usageError(stderr, "ls", fmt.Errorf("--after: %w", err))
	}
	if len(prefix) > maxKey || len(after) > maxKey {
		return usageError(stderr, "ls", fmt.Errorf("PREFIX and --after are at most %d bytes", maxKey))
	}
	c, err := dial(ctx, o.socket)
	if err != nil {
		fmt.Fprintf(stderr, "ftkv ls: %v\n", err)
		return 1
	}
	defer c.close()
	w := bufio.NewWriter(stdout)
	left := o.limit // keys still to print, when o.limit > 0
	for {
		ask := uint32(0) // the server's page
		if o.limit > 0 {
			ask = uint32(min(left, listPageKeys))
		}
		req := listRequest(prefix, after, ask)
		rep, err := c.roundTrip(req)
		if err == nil {
			err = checkReply(req.code, rep)
		}
		if err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "ftkv ls: %v\n", err)
			return 1
		}
		if rep.code == statusError {
			w.Flush()
			fmt.Fprintf(stderr, "ftkv ls: the server says: %s\n", rep.fields[0])
			return 1
		}
		keys, more, _ := parseListReply(rep) // checked by checkReply
		if err := checkPage(keys, prefix, after, ask); err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "ftkv ls: malformed reply: %v\n", err)
			return 1
		}
		for _, k := range keys {
			w.WriteString(printKey(k))
			w.WriteByte('\n')
		}
		left -= len(keys)
		if len(keys) > 0 {
			after = keys[len(keys)-1]
		}
		if !more {
			break
		}
		if o.limit > 0 && left == 0 {
			if err := w.Flush(); err == nil {
				fmt.Fprintf(stderr, "ftkv ls: more keys follow; continue with --after %s\n", shellQuote(printKey(after)))
			}
			break
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "ftkv ls: %v\n", err)
		return 1
	}
	return 0
}

// checkPage checks that a page of keys answers a request for at most ask
// keys (0: any number) with prefix after after.
func checkPage(keys [][]byte, prefix, after []byte, ask uint32) error {
	if ask > 0 && uint64(len(keys)) > uint64(ask) {
		return fmt.Errorf("%d keys, asked for at most %d", len(keys), ask)
	}
	for _, k := range keys {
		if !bytes.HasPrefix(k, prefix) {
			return fmt.Errorf("key %s does not start with the prefix", printKey(k))
		}
	}
	if len(keys) > 0 && bytes.Compare(keys[0], after) <= 0 {
		return fmt.Errorf("key %s does not come after %s", printKey(keys[0]), printKey(after))
	}
	return nil
}

// printKey is key as ls prints it (keyRule).
func printKey(key []byte) string {
	if len(key) > 0 && key[0] != '"' && utf8.Valid(key) {
		plain := true
		for _, r := range string(key) {
			if !strconv.IsPrint(r) {
				plain = false
				break
			}
		}
		if plain {
			return string(key)
		}
	}
	return strconv.Quote(string(key))
}

// keyArg is the key (or prefix) that the argument s names (keyRule): s
// unquoted when it starts with a double quote, else s itself.
func keyArg(s string) ([]byte, error) {
	if !strings.HasPrefix(s, `"`) {
		return []byte(s), nil
	}
	k, err := strconv.Unquote(s)
	if err != nil {
		return nil, fmt.Errorf("%s starts with a double quote but is not a Go-quoted string (as ls prints keys that are not plain text)", s)
	}
	return []byte(k), nil
}

// shellSafe matches the words a POSIX shell passes on unchanged.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`)

// shellQuote quotes s for a POSIX shell, when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// client is a connection to a server: any number of requests, one at a time.
type client struct {
	conn net.Conn
}

// dial connects to the server at path, within ctx (the deadline holds for
// every request on the connection), and sends nothing to a server that
// runs as another user (the socket's peer credentials): a key or a value
// is this user's data.
func dial(ctx context.Context, path string) (*client, error) {
	return dialAs(ctx, path, os.Getuid())
}

// dialAs is dial for a server that must run as uid.
func dialAs(ctx context.Context, path string, uid int) (*client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if got, err := peerUID(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("the server's credentials: %w", err)
	} else if got != uid {
		conn.Close()
		return nil, fmt.Errorf("the server at %s runs as uid %d, not uid %d: sending it nothing", path, got, uid)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return &client{conn: conn}, nil
}

func (c *client) close() { c.conn.Close() }

// roundTrip sends req and returns the reply.
func (c *client) roundTrip(req message) (message, error) {
	_, werr := c.conn.Write(appendFrame(nil, req))
	// Even when the write failed, the server may have answered why (a
	// request over its limit is answered and the connection closed).
	// A reply's fields: a page of keys at most, 4 bytes each at least.
	rep, err := readFrame(c.conn, maxReply, maxReply/4+1)
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

// call sends req to the server at path and returns its reply, within ctx.
func call(ctx context.Context, path string, req message) (message, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return message{}, err
	}
	defer c.close()
	return c.roundTrip(req)
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
