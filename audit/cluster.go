package audit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// This file is the audit's cluster mode (-nodes N): N server processes
// with one app id share every stream through the stages' consumer groups.
// A fault stops one node while the others run on; FLUSH runs on another
// node meanwhile; failovers and changelog restores are measured.

// member is one node of the audited app: its config and current run.
type member struct {
	cfg serverConfig
	cur *server // nil while a fault has it stopped
	run int     // the run number of cur
}

// members are the n nodes sharing base's app: one keeps base as it is
// (server/ and server.log); several get a data dir, log and node id each.
func members(base serverConfig, n int) []*member {
	if n == 1 {
		return []*member{{cfg: base}}
	}
	var out []*member
	for i := 1; i <= n; i++ {
		cfg := base
		cfg.dataDir = fmt.Sprintf("%s-%d", base.dataDir, i)
		cfg.logPath = strings.TrimSuffix(base.logPath, ".log") + fmt.Sprintf("-%d.log", i)
		cfg.nodeID = fmt.Sprintf("node%d", i)
		out = append(out, &member{cfg: cfg})
	}
	return out
}

func (m *member) name() string {
	if m.cfg.nodeID == "" {
		return "server"
	}
	return m.cfg.nodeID
}

// statusKey keys c.status: the last status node m's SHOW STREAMS gave.
func statusKey(m *member, stream string) string { return m.name() + "/" + stream }

// failover is one SIGKILLed node's tasks moving to the others.
type failover struct {
	node string
	// tasks is how many tasks the node held when it was killed.
	tasks int
	// owned: from the kill until the group coordinator gives none of
	// them to the dead node any more (SHOW TASKS on a survivor).
	owned time.Duration
	// processing: from the kill until the survivors opened the last of
	// them (their log's last "partitions assigned": a task is open, its
	// state restored, and reads on from there).
	processing time.Duration
}

// others are the nodes other than m that run now.
func (c *chaos) others(m *member) []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*member
	for _, n := range c.nodes {
		if n != m && n.cur != nil {
			out = append(out, n)
		}
	}
	return out
}

// flushElsewhere runs FLUSH on a running node other than m, in the
// background, and records how it went. A FLUSH that meets a failover may
// wait for the group to settle; it must still return.
func (c *chaos) flushElsewhere(ctx context.Context, m *member) {
	others := c.others(m)
	if len(others) == 0 {
		return
	}
	n := others[c.rng.IntN(len(others))]
	c.mu.Lock()
	s := n.cur
	c.mu.Unlock()
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t0 := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		err := c.flushOnce(fctx, s)
		note := fmt.Sprintf("FLUSH on %s while %s stopped: %s", n.name(), m.name(), time.Since(t0).Round(time.Millisecond))
		switch {
		case err != nil && s.waitExited(2*time.Second):
			// A later fault stopped the node it ran on (or it crashed
			// itself, injected): the FLUSH had no node left to answer.
			note += ", interrupted: " + n.name() + " stopped"
		case err != nil:
			note += ", failed: " + err.Error()
		}
		c.mu.Lock()
		c.midFlushes = append(c.midFlushes, note)
		c.mu.Unlock()
		if c.o.verbose {
			c.logf("%s", note)
		}
	}()
}

// awaitFailover waits, after node killed's SIGKILL at t0, until a
// survivor's group coordinators give none of its tasks to it any more,
// then until the survivors have opened them.
func (c *chaos) awaitFailover(ctx context.Context, killed *member, t0 time.Time) (failover, error) {
	fo := failover{node: killed.name()}
	others := c.others(killed)
	if len(others) == 0 {
		return fo, fmt.Errorf("no node left to take over from %s", killed.name())
	}
	sess := c.o.sessionTimeout
	if sess == 0 {
		sess = 10 * time.Second // the server's default
	}
	deadline := t0.Add(3*sess + 30*time.Second)
	for first := true; ; first = false {
		// A survivor may crash itself meanwhile (injected, a planned
		// fault): it is restarted, and any survivor that answers is asked.
		for _, n := range c.others(killed) {
			if err := c.ensureNodeUp(ctx, n); err != nil {
				return fo, err
			}
		}
		held, unowned, err := 0, 0, fmt.Errorf("no node other than %s answers", killed.name())
		for _, n := range c.others(killed) {
			if held, unowned, err = c.tasksOf(ctx, n, killed.cfg.nodeID); err == nil {
				break
			}
		}
		if first {
			fo.tasks = held
		}
		if err == nil && held == 0 && unowned == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fo, engineFailure{fmt.Errorf("%s SIGKILLed: %d of its tasks still with it, %d with nobody, %s later (last error: %v)",
				killed.name(), held, unowned, time.Since(t0).Round(time.Second), err)}
		}
		time.Sleep(200 * time.Millisecond)
	}
	fo.owned = time.Since(t0)
	// The survivors open the moved tasks once the group has given them:
	// wait until their logs show no new opening for 2 s.
	var logs []string
	for _, n := range others {
		logs = append(logs, n.cfg.logPath)
	}
	settle := time.Now().Add(30 * time.Second)
	for {
		last := lastLogged(logs, "partitions assigned", t0)
		if last.IsZero() {
			last = t0.Add(fo.owned)
		}
		fo.processing = last.Sub(t0)
		if time.Since(last) > 2*time.Second || time.Now().After(settle) {
			return fo, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// tasksOf counts, by SHOW TASKS of every audited stream on node n, the
// tasks whose group gives them to node id, and those it gives to nobody
// (rebalancing). A shared hop's tasks count once.
func (c *chaos) tasksOf(ctx context.Context, n *member, id string) (held, unowned int, err error) {
	c.mu.Lock()
	s := n.cur
	c.mu.Unlock()
	if s == nil {
		return 0, 0, fmt.Errorf("%s is stopped", n.name())
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := s.connect(qctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(qctx)
	seen := map[string]bool{}
	for _, name := range c.names {
		rows, err := conn.Query(qctx, "SHOW TASKS "+name)
		if err != nil {
			return 0, 0, err
		}
		// By column name: SHOW TASKS grows columns (standby_nodes).
		col := map[string]int{}
		for i, f := range rows.FieldDescriptions() {
			col[f.Name] = i
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				return 0, 0, err
			}
			group, _ := vals[col["consumer_group"]].(string)
			key := fmt.Sprintf("%s/%v", group, vals[col["partition"]])
			if seen[key] {
				continue
			}
			seen[key] = true
			switch node, _ := vals[col["node"]].(string); {
			case vals[col["node"]] == nil:
				unowned++
			case node == id:
				held++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
	}
	return held, unowned, nil
}

// flushAll FLUSHes every node. A FLUSH covers the tasks of its own node,
// and a hop's output (records, then the watermark markers a FLUSH writes)
// is read by tasks that may run elsewhere: rounds over every node repeat,
// three at least, until one changes no output topic's end.
func (c *chaos) flushAll(ctx context.Context) error {
	if len(c.nodes) == 1 {
		return c.flush(ctx, c.nodes[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	t0 := time.Now()
	prev := int64(-1)
	for round := 1; ; round++ {
		for _, m := range c.nodes {
			if err := c.flush(ctx, m); err != nil {
				return fmt.Errorf("%s: %w", m.name(), err)
			}
		}
		ends, err := c.producedEnds(ctx, adm)
		if err != nil {
			return err
		}
		if (round >= 3 && ends == prev) || round == 10 {
			c.logf("FLUSH on every node, %d rounds, took %s", round, time.Since(t0).Round(time.Millisecond))
			return nil
		}
		prev = ends
	}
}

// producedEnds sums the end offsets of the streams' output and late-data
// topics. (Hops and changelogs grow at every FLUSH: watermark markers,
// per-commit metadata.)
func (c *chaos) producedEnds(ctx context.Context, adm *kadm.Client) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx)
	if err != nil {
		return 0, fmt.Errorf("list end offsets: %w", err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) {
		t := o.Topic
		if strings.HasPrefix(t, c.prefix+"out_") || strings.HasPrefix(t, c.prefix+"late_") {
			sum += o.Offset
		}
	})
	return sum, nil
}

// countInLogs counts the lines holding what in every node's log.
func (c *chaos) countInLogs(what string) int {
	n := 0
	for _, m := range c.nodes {
		n += max(countInLog(m.cfg.logPath, what), 0)
	}
	return n
}

// restoreFigures sums the server logs' "state restored from the
// changelog" lines (one per task open that read the changelog): how many,
// records, seconds spent, and the largest one.
type restoreFigures struct {
	opens             int
	records           int64
	seconds           float64
	maxRecords        int64
	maxRecordsSeconds float64
}

func (c *chaos) restores() restoreFigures {
	var f restoreFigures
	for _, m := range c.nodes {
		eachLine(m.cfg.logPath, func(line string) {
			if !strings.Contains(line, "state restored from the changelog") {
				return
			}
			n, _ := strconv.ParseInt(logField(line, "records"), 10, 64)
			secs, _ := strconv.ParseFloat(logField(line, "seconds"), 64)
			f.opens++
			f.records += n
			f.seconds += secs
			if n > f.maxRecords {
				f.maxRecords, f.maxRecordsSeconds = n, secs
			}
		})
	}
	return f
}

// printCluster prints the cluster run's figures: failovers, restores,
// restarts on an empty disk, FLUSHes on other nodes during faults.
func (c *chaos) printCluster(w io.Writer) {
	fmt.Fprintf(w, "cluster: %d nodes; %d restarts on an emptied data dir\n", len(c.nodes), c.wiped)
	if len(c.failovers) > 0 {
		var owned, proc []time.Duration
		for _, fo := range c.failovers {
			fmt.Fprintf(w, "  failover after SIGKILL of %s (%d tasks): moved in %s, processing again in %s\n",
				fo.node, fo.tasks, fo.owned.Round(time.Millisecond), fo.processing.Round(time.Millisecond))
			owned, proc = append(owned, fo.owned), append(proc, fo.processing)
		}
		slices.Sort(owned)
		slices.Sort(proc)
		fmt.Fprintf(w, "  failover time (kill -> tasks processing on the survivors): median %s, max %s (moved: median %s); session timeout %s, %d standby replicas\n",
			proc[len(proc)/2].Round(time.Millisecond), proc[len(proc)-1].Round(time.Millisecond), owned[len(owned)/2].Round(time.Millisecond), c.sessionTimeout(), c.o.standbys)
	}
	r := c.restores()
	if r.opens > 0 {
		fmt.Fprintf(w, "  changelog restores: %d task opens, %d records in %.2f s (%.0f records/s overall); largest %d records in %.2f s (%.0f records/s)\n",
			r.opens, r.records, r.seconds, float64(r.records)/max(r.seconds, 1e-3), r.maxRecords, r.maxRecordsSeconds, float64(r.maxRecords)/max(r.maxRecordsSeconds, 1e-3))
	}
	c.mu.Lock()
	notes := slices.Clone(c.midFlushes)
	c.mu.Unlock()
	failed := 0
	for _, n := range notes {
		if strings.Contains(n, "failed:") {
			failed++
		}
		if c.o.verbose || strings.Contains(n, "failed:") {
			fmt.Fprintln(w, "  "+n)
		}
	}
	fmt.Fprintf(w, "  FLUSH on another node during a fault: %d run, %d failed (interrupted by a stop of their own node not counted)\n", len(notes), failed)
}

func (c *chaos) sessionTimeout() time.Duration {
	if c.o.sessionTimeout > 0 {
		return c.o.sessionTimeout
	}
	return 10 * time.Second
}

// lastLogged is the time of the last line holding what, logged after
// since, in any of logs (zero: none).
func lastLogged(logs []string, what string, since time.Time) time.Time {
	var last time.Time
	for _, p := range logs {
		eachLine(p, func(line string) {
			if !strings.Contains(line, what) {
				return
			}
			if t, ok := logTime(line); ok && t.After(since) && t.After(last) {
				last = t
			}
		})
	}
	return last
}

func eachLine(path string, fn func(string)) {
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
}

// logTime is the time of a server log line (slog's text handler: it
// starts with time=RFC3339).
func logTime(line string) (time.Time, bool) {
	v := logField(line, "time")
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// logField is the value of key=value in a slog text line ("" if absent).
func logField(line, key string) string {
	i := strings.Index(line, key+"=")
	for i > 0 && line[i-1] != ' ' {
		j := strings.Index(line[i+1:], " "+key+"=")
		if j < 0 {
			return ""
		}
		i += 1 + j + 1
	}
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+1:]
	if strings.HasPrefix(v, `"`) {
		if uq, err := strconv.QuotedPrefix(v); err == nil {
			s, _ := strconv.Unquote(uq)
			return s
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}
