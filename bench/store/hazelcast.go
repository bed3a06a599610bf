package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hazelcast/hazelcast-go-client"
	"github.com/hazelcast/hazelcast-go-client/cluster"
	"github.com/hazelcast/hazelcast-go-client/logger"
	"github.com/hazelcast/hazelcast-go-client/types"
)

// Hazelcast: the open-source member jar from Maven Central at a pinned
// version, members started by this program on 127.0.0.1 (TCP/IP join, no
// multicast, no auto-detection, no phone-home), one IMap per copy count with
// backup-count = copies-1 and async-backup-count 0 (synchronous backups).
// The cluster grows member by member as the copy count grows, so at copy
// count K it has exactly K members and every member holds every entry.
// Driven by the official Go client (smart routing: the client sends each
// operation to the partition's owner).

const (
	hazelcastVersion = "5.5.0"
	hazelcastGAV     = "com.hazelcast:hazelcast:" + hazelcastVersion
	hazelcastClient  = "github.com/hazelcast/hazelcast-go-client"
	// hazelcastMaxCopies: Hazelcast allows at most 6 backups.
	hazelcastMaxCopies = 7
	// hazelcastDefaultBackupTimeout is Hazelcast's default for
	// hazelcast.operation.backup.timeout.millis.
	hazelcastDefaultBackupTimeout = 5 * time.Second
)

// hzConfig is what one member's configuration file says.
type hzConfig struct {
	ClusterName   string
	Port          int   // this member's port on 127.0.0.1
	Join          []int // ports of the members to join (running ones and this one)
	MaxCopies     int   // maps bench-c1 .. bench-c<MaxCopies> are configured
	BackupTimeout time.Duration
}

// hzMapName is the map used at a copy count.
func hzMapName(copies int) string { return "bench-c" + strconv.Itoa(copies) }

// hazelcastXML renders a member's configuration (Hazelcast 5.5 schema).
func hazelcastXML(c hzConfig) ([]byte, error) {
	if c.MaxCopies < 1 || c.MaxCopies > hazelcastMaxCopies {
		return nil, fmt.Errorf("hazelcast: copies must be 1..%d", hazelcastMaxCopies)
	}
	if c.BackupTimeout <= 0 {
		return nil, fmt.Errorf("hazelcast: backup timeout must be positive")
	}
	esc := func(s string) string {
		var b bytes.Buffer
		xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<hazelcast xmlns="http://www.hazelcast.com/schema/config"
           xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
           xsi:schemaLocation="http://www.hazelcast.com/schema/config http://www.hazelcast.com/schema/config/hazelcast-config-5.5.xsd">
`)
	fmt.Fprintf(&b, "  <cluster-name>%s</cluster-name>\n", esc(c.ClusterName))
	b.WriteString("  <properties>\n")
	props := [][2]string{
		// How long a member waits for synchronous backup acknowledgements
		// before it reports the operation successful anyway.
		{"hazelcast.operation.backup.timeout.millis", strconv.FormatInt(c.BackupTimeout.Milliseconds(), 10)},
		{"hazelcast.phone.home.enabled", "false"},
		{"hazelcast.socket.bind.any", "false"},
		{"hazelcast.wait.seconds.before.join", "0"},
		{"hazelcast.health.monitoring.level", "OFF"},
		{"hazelcast.shutdownhook.policy", "TERMINATE"},
	}
	for _, p := range props {
		fmt.Fprintf(&b, "    <property name=%q>%s</property>\n", p[0], esc(p[1]))
	}
	b.WriteString("  </properties>\n")
	b.WriteString("  <network>\n")
	fmt.Fprintf(&b, "    <port auto-increment=\"false\">%d</port>\n", c.Port)
	b.WriteString("    <interfaces enabled=\"true\"><interface>127.0.0.1</interface></interfaces>\n")
	b.WriteString("    <join>\n      <auto-detection enabled=\"false\"/>\n      <multicast enabled=\"false\"/>\n")
	b.WriteString("      <tcp-ip enabled=\"true\" connection-timeout-seconds=\"2\">\n        <member-list>\n")
	for _, p := range c.Join {
		fmt.Fprintf(&b, "          <member>127.0.0.1:%d</member>\n", p)
	}
	b.WriteString("        </member-list>\n      </tcp-ip>\n    </join>\n  </network>\n")
	b.WriteString("  <jet enabled=\"false\"/>\n")
	for k := 1; k <= c.MaxCopies; k++ {
		fmt.Fprintf(&b, "  <map name=%q>\n", hzMapName(k))
		fmt.Fprintf(&b, "    <backup-count>%d</backup-count>\n", k-1)
		b.WriteString("    <async-backup-count>0</async-backup-count>\n")
		b.WriteString("    <read-backup-data>false</read-backup-data>\n")
		b.WriteString("    <in-memory-format>BINARY</in-memory-format>\n")
		b.WriteString("  </map>\n")
	}
	b.WriteString("</hazelcast>\n")
	return b.Bytes(), nil
}

// hazelcastJVMArgs are the java flags of a member: a fixed small heap, and
// the module access Hazelcast asks for on Java 9+ for its fast paths.
var hazelcastJVMArgs = []string{
	"-Xms256m", "-Xmx512m",
	"-Djava.net.preferIPv4Stack=true",
	"--add-modules", "java.se",
	"--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang=ALL-UNNAMED",
	"--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-opens", "java.management/sun.management=ALL-UNNAMED",
	"--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
}

type hazelcastPeer struct {
	java, jar     string
	dir           string
	clusterName   string
	backupTimeout time.Duration
	memberStart   time.Duration // bounds the start of one batch of members

	members []*proc
	ports   []int
	client  *hazelcast.Client
	seen    atomic.Int32 // members the client knows of
	m       *hazelcast.Map
	warn    []string
}

// setupHazelcast installs a Java runtime and Maven when missing and fetches
// the member jar.
func setupHazelcast(ctx context.Context, in *installer, dir string, backupTimeout time.Duration) (*hazelcastPeer, error) {
	java, err := in.ensureCommand(ctx, "java", "openjdk-17-jre-headless")
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, "hazelcast")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	jar, err := mavenJar(ctx, in, d, hazelcastGAV)
	if err != nil {
		return nil, err
	}
	return &hazelcastPeer{
		java: java, jar: jar, dir: d,
		clusterName:   fmt.Sprintf("bench-store-%d", os.Getpid()),
		backupTimeout: backupTimeout,
		memberStart:   3 * time.Minute,
	}, nil
}

func (h *hazelcastPeer) supports(copies int) string {
	if copies > hazelcastMaxCopies {
		return fmt.Sprintf("Hazelcast allows at most %d backups (copies %d)", hazelcastMaxCopies-1, hazelcastMaxCopies)
	}
	return ""
}

// startMembers starts n more members at once and waits until the cluster
// has them all.
func (h *hazelcastPeer) startMembers(ctx context.Context, n int) error {
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	all := append(append([]int(nil), h.ports...), ports...)
	var started []*proc
	for i, port := range ports {
		cfg, err := hazelcastXML(hzConfig{
			ClusterName: h.clusterName, Port: port,
			Join:          all[:len(h.ports)+i+1],
			MaxCopies:     hazelcastMaxCopies,
			BackupTimeout: h.backupTimeout,
		})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("hazelcast-member-%d", len(h.ports)+i+1)
		cfgPath := filepath.Join(h.dir, name+".xml")
		if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
			return err
		}
		argv := append([]string{h.java}, hazelcastJVMArgs...)
		argv = append(argv, "-Dhazelcast.config="+cfgPath, "-cp", h.jar, "com.hazelcast.core.server.HazelcastMemberStarter")
		p, err := procs.start(name, filepath.Join(h.dir, name+".log"), argv,
			[]string{"HZ_PHONE_HOME_ENABLED=false"}, h.dir)
		if err != nil {
			return err
		}
		h.members = append(h.members, p)
		started = append(started, p)
	}
	h.ports = all
	wctx, cancel := context.WithTimeout(ctx, h.memberStart)
	defer cancel()
	want := fmt.Sprintf("Members {size:%d,", len(h.ports))
	for _, p := range started {
		if err := waitLog(wctx, p, "is STARTED", 1); err != nil {
			return err
		}
	}
	// The first member (the master) lists the cluster at every change.
	return waitLog(wctx, h.members[0], want, 1)
}

func (h *hazelcastPeer) prepare(ctx context.Context, copies, writers int) (kv, error) {
	if copies < len(h.members) {
		// Shrinking would need a graceful leave; copy counts run ascending.
		return nil, fmt.Errorf("hazelcast: the cluster has %d members and cannot shrink to %d", len(h.members), copies)
	}
	for _, p := range h.members {
		if p.exited() {
			return nil, fmt.Errorf("hazelcast: %s exited (%v)", p.name, p.err)
		}
	}
	migrations := 0
	if len(h.members) > 0 {
		b, _ := os.ReadFile(h.members[0].log)
		migrations = bytes.Count(b, []byte(hzMigrationsDone))
	}
	grew := copies > len(h.members) && len(h.members) > 0
	if n := copies - len(h.members); n > 0 {
		if err := h.startMembers(ctx, n); err != nil {
			return nil, err
		}
	}
	if h.client == nil {
		if err := h.connect(ctx); err != nil {
			return nil, err
		}
	}
	// Wait until the client knows every member and, after a join, the master
	// has finished moving partitions to the new members.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for int(h.seen.Load()) != copies {
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("hazelcast: the client sees %d members, want %d", h.seen.Load(), copies)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if grew {
		if err := waitLog(wctx, h.members[0], hzMigrationsDone, migrations+1); err != nil {
			h.warn = append(h.warn, fmt.Sprintf("at copies=%d the end of partition migration was not seen in the master's log; measured anyway", copies))
		}
	}
	m, err := h.client.GetMap(ctx, hzMapName(copies))
	if err != nil {
		return nil, err
	}
	h.m = m
	return h, nil
}

// hzMigrationsDone is what the master logs when partition migration after a
// membership change has finished.
const hzMigrationsDone = "All migration tasks have been completed"

func (h *hazelcastPeer) connect(ctx context.Context) error {
	cfg := hazelcast.NewConfig()
	cfg.Cluster.Name = h.clusterName
	for _, p := range h.ports {
		cfg.Cluster.Network.SetAddresses(fmt.Sprintf("127.0.0.1:%d", p))
	}
	cfg.Cluster.InvocationTimeout = types.Duration(30 * time.Second)
	cfg.Cluster.ConnectionStrategy.Timeout = types.Duration(30 * time.Second)
	cfg.Logger.Level = logger.OffLevel
	cfg.Stats.Enabled = false
	cfg.AddMembershipListener(func(e cluster.MembershipStateChanged) {
		switch e.State {
		case cluster.MembershipStateAdded:
			h.seen.Add(1)
		case cluster.MembershipStateRemoved:
			h.seen.Add(-1)
		}
	})
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := hazelcast.StartNewClientWithConfig(cctx, cfg)
	if err != nil {
		return fmt.Errorf("hazelcast client: %w", err)
	}
	h.client = c
	return nil
}

func (h *hazelcastPeer) Put(ctx context.Context, w int, key string, value []byte) error {
	return h.m.Set(ctx, key, value)
}

func (h *hazelcastPeer) Get(ctx context.Context, w int, key string) ([]byte, error) {
	v, err := h.m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("hazelcast: get %s returned %T", key, v)
	}
	return b, nil
}

func (h *hazelcastPeer) done(copies int) {
	if h.m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h.m.Destroy(ctx) // its entries would only be migrated around
		cancel()
		h.m = nil
	}
}

func (h *hazelcastPeer) notes() []string {
	setting := fmt.Sprintf("%d ms", h.backupTimeout.Milliseconds())
	if h.backupTimeout == hazelcastDefaultBackupTimeout {
		setting += " (Hazelcast's default)"
	}
	n := []string{
		fmt.Sprintf("Hazelcast %s (member jar %s from Maven Central), a cluster of `copies` members on 127.0.0.1 (TCP/IP join, multicast and auto-detection off); "+
			"IMap backup-count = copies-1, async-backup-count 0 (synchronous backups); client %s %s (smart routing, one client shared by the writers); a put is IMap.set, a get IMap.get.",
			hazelcastVersion, hazelcastGAV, hazelcastClient, moduleVersion(hazelcastClient)),
		"NOTE: Hazelcast's \"sync\" backups report success after a 5 s backup timeout unless configured otherwise: a member answers a put once its backups acknowledge it, " +
			"or once hazelcast.operation.backup.timeout.millis (default 5000 ms) has passed without their acknowledgement, reporting success all the same. " +
			"Setting used: hazelcast.operation.backup.timeout.millis = " + setting + ".",
	}
	return append(n, h.warn...)
}

func (h *hazelcastPeer) close() {
	if h.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h.client.Shutdown(ctx)
		cancel()
		h.client = nil
	}
	for _, p := range h.members {
		procs.stop(p, 3*time.Second)
	}
	h.members = nil
}
