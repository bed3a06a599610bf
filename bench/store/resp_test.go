package main

import (
	"bufio"
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, []byte("SET"), []byte("k"), []byte("a\r\nb"), []byte("")))
	want := "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n$0\r\n\r\n"
	if got != want {
		t.Errorf("appendCommand = %q, want %q", got, want)
	}
}

func TestReadReply(t *testing.T) {
	tests := []struct {
		in   string
		want reply
	}{
		{"+OK\r\n", reply{kind: '+', str: "OK"}},
		{"-ERR wrong number\r\n", reply{kind: '-', str: "ERR wrong number"}},
		{":2\r\n", reply{kind: ':', n: 2}},
		{":-7\r\n", reply{kind: ':', n: -7}},
		{"$5\r\nhe\r\no\r\n", reply{kind: '$', bulk: []byte("he\r\no")}},
		{"$0\r\n\r\n", reply{kind: '$', bulk: []byte{}}},
		{"$-1\r\n", reply{kind: '$', null: true}},
		{"*-1\r\n", reply{kind: '*', null: true}},
		{"*0\r\n", reply{kind: '*', array: []reply{}}},
		{"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n", reply{kind: '*', array: []reply{
			{kind: ':', n: 1},
			{kind: '*', array: []reply{{kind: '$', bulk: []byte("x")}}},
		}}},
	}
	for _, tt := range tests {
		got, err := readReply(bufio.NewReader(strings.NewReader(tt.in)))
		if err != nil {
			t.Errorf("readReply(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("readReply(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	if err := (reply{kind: '-', str: "ERR x"}).err(); err == nil || !strings.Contains(err.Error(), "ERR x") {
		t.Errorf("error reply gives error %v", err)
	}
	if err := (reply{kind: '+', str: "OK"}).err(); err != nil {
		t.Errorf("OK reply gives error %v", err)
	}
}

func TestReadReplyRejects(t *testing.T) {
	for _, in := range []string{
		"",                                      // nothing
		"\r\n",                                  // empty line
		"+OK\n",                                 // LF only
		"+OK",                                   // no line end
		"?what\r\n",                             // unknown type
		":12x\r\n",                              // bad integer
		"$x\r\n",                                // bad length
		"$-2\r\n",                               // bad length
		"$999999999999\r\n",                     // too long
		"$3\r\nab\r\n",                          // short bulk
		"$2\r\nabcd",                            // bulk not followed by CRLF
		"*2\r\n:1\r\n",                          // array cut short
		"*-5\r\n",                               // bad array length
		strings.Repeat("*1\r\n", 20) + ":1\r\n", // nested too deep
	} {
		if r, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("readReply(%q) = %+v, want error", in, r)
		}
	}
}

func TestReadReplySequence(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("+OK\r\n:1\r\n$2\r\nhi\r\n"))
	var kinds []byte
	for range 3 {
		rep, err := readReply(r)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, rep.kind)
	}
	if string(kinds) != "+:$" {
		t.Errorf("kinds = %q", kinds)
	}
	if _, err := readReply(r); err == nil {
		t.Error("read past the end without error")
	}
}

func TestParseReplicationInfo(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=127.0.0.1,port=6380,state=online,offset=14,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=6381,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave2:ip=127.0.0.1,port=6382,state=online,offset=14,lag=1\r\n" +
		"slave_read_only:1\r\nmaster_repl_offset:14\r\n"
	got := parseReplicationInfo(info)
	want := replicaStatus{role: "master", online: 2, total: 3}
	if got != want {
		t.Errorf("parseReplicationInfo = %+v, want %+v", got, want)
	}
	if got := parseReplicationInfo("role:master\r\nconnected_slaves:0\r\n"); got.online != 0 || got.total != 0 {
		t.Errorf("no replicas: %+v", got)
	}
}

func TestSetWait(t *testing.T) {
	cmds := setWaitCommands("k", []byte("v"), 3, 1500*time.Millisecond)
	want := [][][]byte{{[]byte("SET"), []byte("k"), []byte("v")}, {[]byte("WAIT"), []byte("2"), []byte("1500")}}
	if !reflect.DeepEqual(cmds, want) {
		t.Errorf("setWaitCommands = %q, want %q", cmds, want)
	}
	if cmds := setWaitCommands("k", []byte("v"), 1, time.Second); len(cmds) != 1 {
		t.Errorf("copies=1: %d commands, want SET alone", len(cmds))
	}

	ok := reply{kind: '+', str: "OK"}
	tests := []struct {
		reps   []reply
		copies int
		fail   bool
	}{
		{[]reply{ok}, 1, false},
		{[]reply{ok, {kind: ':', n: 2}}, 3, false},
		{[]reply{ok, {kind: ':', n: 3}}, 3, false}, // more acks than asked: fine
		{[]reply{ok, {kind: ':', n: 1}}, 3, true},  // WAIT timed out short
		{[]reply{ok}, 3, true},                     // no WAIT reply
		{[]reply{{kind: '-', str: "OOM"}, {kind: ':', n: 2}}, 3, true},
		{[]reply{ok, {kind: '-', str: "ERR"}}, 2, true},
		{[]reply{{kind: '$', bulk: []byte("OK")}}, 1, true},
		{nil, 1, true},
	}
	for _, tt := range tests {
		err := checkSetWait(tt.reps, tt.copies)
		if (err != nil) != tt.fail {
			t.Errorf("checkSetWait(%+v, %d) = %v, want failure %v", tt.reps, tt.copies, err, tt.fail)
		}
	}
}

// TestPipelineFakeServer runs the client against a fake server over an
// in-memory pipe: the server decodes the commands with readReply (a command
// is an array of bulk strings) and answers as Redis would.
func TestPipelineFakeServer(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	got := make(chan [][]string, 1)
	go func() {
		defer srv.Close()
		r := bufio.NewReader(srv)
		var cmds [][]string
		for range 3 {
			rep, err := readReply(r)
			if err != nil {
				got <- nil
				return
			}
			var args []string
			for _, a := range rep.array {
				args = append(args, string(a.bulk))
			}
			cmds = append(cmds, args)
		}
		got <- cmds
		srv.Write([]byte("+OK\r\n:2\r\n$5\r\nvalue\r\n"))
	}()
	c := &respConn{c: cli, r: bufio.NewReader(cli)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmds := setWaitCommands("key", []byte("value"), 3, time.Second)
	cmds = append(cmds, [][]byte{[]byte("GET"), []byte("key")})
	reps, err := c.pipeline(ctx, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"SET", "key", "value"}, {"WAIT", "2", "1000"}, {"GET", "key"}}
	if g := <-got; !reflect.DeepEqual(g, want) {
		t.Errorf("server saw %q, want %q", g, want)
	}
	if err := checkSetWait(reps[:2], 3); err != nil {
		t.Error(err)
	}
	if string(reps[2].bulk) != "value" {
		t.Errorf("GET reply %+v", reps[2])
	}
}
