package main

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
	"time"
)

// hzDoc is the part of a Hazelcast configuration the tests check.
type hzDoc struct {
	XMLName     xml.Name `xml:"hazelcast"`
	ClusterName string   `xml:"cluster-name"`
	Properties  []struct {
		Name  string `xml:"name,attr"`
		Value string `xml:",chardata"`
	} `xml:"properties>property"`
	Network struct {
		Port struct {
			AutoIncrement string `xml:"auto-increment,attr"`
			Value         int    `xml:",chardata"`
		} `xml:"port"`
		Interfaces struct {
			Enabled   string   `xml:"enabled,attr"`
			Interface []string `xml:"interface"`
		} `xml:"interfaces"`
		Join struct {
			AutoDetection struct {
				Enabled string `xml:"enabled,attr"`
			} `xml:"auto-detection"`
			Multicast struct {
				Enabled string `xml:"enabled,attr"`
			} `xml:"multicast"`
			TCPIP struct {
				Enabled string   `xml:"enabled,attr"`
				Members []string `xml:"member-list>member"`
			} `xml:"tcp-ip"`
		} `xml:"join"`
	} `xml:"network"`
	Maps []struct {
		Name             string `xml:"name,attr"`
		BackupCount      int    `xml:"backup-count"`
		AsyncBackupCount int    `xml:"async-backup-count"`
	} `xml:"map"`
}

func TestHazelcastXML(t *testing.T) {
	b, err := hazelcastXML(hzConfig{
		ClusterName: "bench<&>", Port: 5702, Join: []int{5701, 5702},
		MaxCopies: 6, BackupTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var d hzDoc
	if err := xml.Unmarshal(b, &d); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, b)
	}
	if d.XMLName.Space != "http://www.hazelcast.com/schema/config" {
		t.Errorf("namespace %q", d.XMLName.Space)
	}
	if d.ClusterName != "bench<&>" {
		t.Errorf("cluster name %q", d.ClusterName)
	}
	props := make(map[string]string)
	for _, p := range d.Properties {
		props[p.Name] = p.Value
	}
	for k, v := range map[string]string{
		"hazelcast.operation.backup.timeout.millis": "5000",
		"hazelcast.phone.home.enabled":              "false",
		"hazelcast.socket.bind.any":                 "false",
	} {
		if props[k] != v {
			t.Errorf("property %s = %q, want %q", k, props[k], v)
		}
	}
	n := d.Network
	if n.Port.Value != 5702 || n.Port.AutoIncrement != "false" {
		t.Errorf("port %+v", n.Port)
	}
	if n.Interfaces.Enabled != "true" || !slices.Equal(n.Interfaces.Interface, []string{"127.0.0.1"}) {
		t.Errorf("interfaces %+v: want 127.0.0.1 only", n.Interfaces)
	}
	if n.Join.Multicast.Enabled != "false" || n.Join.AutoDetection.Enabled != "false" || n.Join.TCPIP.Enabled != "true" {
		t.Errorf("join %+v: want multicast and auto-detection off, tcp-ip on", n.Join)
	}
	if !slices.Equal(n.Join.TCPIP.Members, []string{"127.0.0.1:5701", "127.0.0.1:5702"}) {
		t.Errorf("members %q", n.Join.TCPIP.Members)
	}
	if len(d.Maps) != 6 {
		t.Fatalf("%d maps, want 6", len(d.Maps))
	}
	for i, m := range d.Maps {
		k := i + 1
		if m.Name != hzMapName(k) || m.BackupCount != k-1 || m.AsyncBackupCount != 0 {
			t.Errorf("map %d = %+v, want %s with backup-count %d, async 0", i, m, hzMapName(k), k-1)
		}
	}

	// Another backup timeout is written as given.
	b, _ = hazelcastXML(hzConfig{ClusterName: "c", Port: 1, Join: []int{1}, MaxCopies: 1, BackupTimeout: 250 * time.Millisecond})
	if !strings.Contains(string(b), `"hazelcast.operation.backup.timeout.millis">250<`) {
		t.Errorf("backup timeout 250ms not in\n%s", b)
	}
	for _, bad := range []hzConfig{
		{ClusterName: "c", Port: 1, MaxCopies: 8, BackupTimeout: time.Second}, // more than 6 backups
		{ClusterName: "c", Port: 1, MaxCopies: 0, BackupTimeout: time.Second},
		{ClusterName: "c", Port: 1, MaxCopies: 2},
	} {
		if _, err := hazelcastXML(bad); err == nil {
			t.Errorf("hazelcastXML(%+v) accepted", bad)
		}
	}
}

func TestRedisArgs(t *testing.T) {
	primary := redisArgs("/usr/bin/redis-server", "/tmp/d", 7000, 0)
	replica := redisArgs("/usr/bin/redis-server", "/tmp/d", 7001, 7000)
	flag := func(args []string, name string) []string {
		i := slices.Index(args, name)
		if i < 0 {
			return nil
		}
		end := i + 2
		if name == "--replicaof" {
			end = i + 3
		}
		return args[i+1 : end]
	}
	for _, a := range [][]string{primary, replica} {
		if got := flag(a, "--bind"); !slices.Equal(got, []string{"127.0.0.1"}) {
			t.Errorf("bind %q", got)
		}
		if got := flag(a, "--save"); !slices.Equal(got, []string{""}) {
			t.Errorf("save %q: want persistence off", got)
		}
		if got := flag(a, "--appendonly"); !slices.Equal(got, []string{"no"}) {
			t.Errorf("appendonly %q", got)
		}
	}
	if flag(primary, "--replicaof") != nil {
		t.Error("the primary is a replica")
	}
	if got := flag(replica, "--replicaof"); !slices.Equal(got, []string{"127.0.0.1", "7000"}) {
		t.Errorf("replicaof %q", got)
	}
	if got := flag(replica, "--port"); !slices.Equal(got, []string{"7001"}) {
		t.Errorf("port %q", got)
	}
}

func TestEtcdArgs(t *testing.T) {
	a := etcdArgs("/usr/bin/etcd", "/dev/shm/x/m1", "tok", 1, []int{100, 101, 102}, []int{200, 201, 202})
	get := func(name string) string {
		i := slices.Index(a, name)
		if i < 0 || i+1 >= len(a) {
			t.Fatalf("no %s in %q", name, a)
		}
		return a[i+1]
	}
	checks := map[string]string{
		"--name":                        "m1",
		"--data-dir":                    "/dev/shm/x/m1",
		"--listen-client-urls":          "http://127.0.0.1:101",
		"--advertise-client-urls":       "http://127.0.0.1:101",
		"--listen-peer-urls":            "http://127.0.0.1:201",
		"--initial-advertise-peer-urls": "http://127.0.0.1:201",
		"--initial-cluster":             "m0=http://127.0.0.1:200,m1=http://127.0.0.1:201,m2=http://127.0.0.1:202",
		"--initial-cluster-state":       "new",
		"--initial-cluster-token":       "tok",
	}
	for k, v := range checks {
		if got := get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, x := range a {
		if strings.Contains(x, "://") && !strings.Contains(x, "127.0.0.1") {
			t.Errorf("URL %q not on loopback", x)
		}
	}
}

func TestVersionParsers(t *testing.T) {
	if v := parseRedisVersion("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1\n"); v != "7.0.15" {
		t.Errorf("redis version %q", v)
	}
	if v := parseEtcdVersion("etcd Version: 3.4.23\nGit SHA: Not provided\nGo Version: go1.19.8\n"); v != "3.4.23" {
		t.Errorf("etcd version %q", v)
	}
	policy := "etcd-server:\n  Installed: (none)\n  Candidate: 3.4.23-4+b4\n  Version table:\n"
	if v := aptCandidate(policy); v != "3.4.23-4+b4" {
		t.Errorf("candidate %q", v)
	}
	if v := aptCandidate("etcd:\n  Installed: (none)\n  Candidate: (none)\n"); v != "" {
		t.Errorf("candidate (none) gave %q", v)
	}
	for in, want := range map[string]string{
		"etcd-server: /usr/bin/etcd\n":               "etcd-server",
		"redis-tools:amd64: /usr/bin/redis-server\n": "redis-tools",
		"dpkg-query: no path found matching pattern": "",
		"diversion by a from: /x\n":                  "",
		"":                                           "",
	} {
		if got := parseDpkgSearch(in); got != want {
			t.Errorf("parseDpkgSearch(%q) = %q, want %q", in, got, want)
		}
	}
	if v := aptCandidate(""); v != "" {
		t.Errorf("no output gave %q", v)
	}
}
