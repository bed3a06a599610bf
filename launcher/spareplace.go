package launcher

import (
	"fmt"
	"strings"

	"github.com/ftrma/ftrma"
)

// Where a spare goes (--respawn). A spare replaces a failed rank (the
// spawn request's near hint, jobwire.SpawnRequest.Near) and starts, in
// order of preference:
//
//  1. on the replaced rank's host, if that host is alive (its agent's link
//     up, not declared dead by the host group) and has a free slot (or
//     --oversubscribe);
//  2. on a host of --spare-hosts, alive with a free slot, in the order
//     given;
//  3. on another remote host of the job, alive with a free slot: the
//     slots of the hostfile or allocation beyond -n;
//  4. on ftrun's own host, if it runs ranks of the job and has a free
//     slot (or --oversubscribe);
//
// else the spawn fails and says why for each host. A host's free slots are
// its slots minus its running ranks: a failed rank frees its slot, and so
// does the replaced rank before ftrun has reaped it.
//
// Hosts given only for spares (--spare-hosts, and the hosts of a hostfile
// or allocation that get no rank while spares need slots) get their agent
// at launch, as every other host: with no ranks, ready to start spares.
// Started at launch, a spare host that cannot be reached fails the job's
// start rather than a Replace much later, and it sits in the host group
// from the start, so that its loss is known before a spare goes there.

// jobHost is one host of the job, as the placement of spares sees it.
type jobHost struct {
	link  *agentLink   // nil: ftrun's own host
	label string       // for reports
	slots int          // ranks it runs at once without --oversubscribe
	spare bool         // a host of --spare-hosts
	ranks []ftrma.Rank // every rank started there (grows with spares); guarded by Job.mu
}

// hostState is what chooseSpareHost knows of one host.
type hostState struct {
	label   string
	local   bool // ftrun's own host
	runs    bool // ftrun's own host runs ranks of the job (ftrun can start the program here)
	alive   bool
	spare   bool // a host of --spare-hosts
	running int  // ranks running there
	slots   int
}

func (h hostState) free() bool { return h.running < h.slots }

// why says why h cannot take a spare.
func (h hostState) why(oversubscribe bool) string {
	switch {
	case !h.alive:
		return fmt.Sprintf("%s is lost", h.label)
	case h.local && !h.runs:
		return fmt.Sprintf("%s runs no rank of the job", h.label)
	case !h.free() && !(oversubscribe && h.local):
		return fmt.Sprintf("%s is full (%d ranks run on %s)", h.label, h.running, plural(h.slots, "slot"))
	}
	return ""
}

// chooseSpareHost picks the host of a spare that replaces a rank of host
// near (an index in hosts, or -1 for no hint), by the order above. The
// error says why no host can take it.
func chooseSpareHost(hosts []hostState, near int, oversubscribe bool) (int, error) {
	ok := func(h hostState, over bool) bool {
		return h.alive && (!h.local || h.runs) && (h.free() || over)
	}
	if near >= 0 && near < len(hosts) && ok(hosts[near], oversubscribe) {
		return near, nil
	}
	for _, spare := range []bool{true, false} {
		for i, h := range hosts {
			if !h.local && h.spare == spare && ok(h, false) {
				return i, nil
			}
		}
	}
	for i, h := range hosts {
		if h.local && ok(h, oversubscribe) {
			return i, nil
		}
	}
	var why []string
	if near >= 0 && near < len(hosts) {
		why = append(why, "the replaced rank's host "+hosts[near].why(oversubscribe))
	}
	spares := false
	for i, h := range hosts {
		spares = spares || h.spare
		if i != near {
			why = append(why, h.why(oversubscribe))
		}
	}
	if !spares {
		why = append(why, "no --spare-hosts given")
	}
	return -1, fmt.Errorf("no host can take a spare rank: %s", strings.Join(why, "; "))
}

// placeSpareLocked picks the host of a spare that replaces rank near (-1:
// no hint). j.mu is held.
func (j *Job) placeSpareLocked(near ftrma.Rank) (*jobHost, error) {
	states := make([]hostState, len(j.hosts))
	at := -1
	for i, h := range j.hosts {
		st := hostState{label: h.label, slots: h.slots, spare: h.spare, alive: true}
		ranks := h.ranks
		if h.link == nil {
			st.local, st.runs, st.label = true, j.path != "", "this host"
			ranks = j.local
			st.slots = j.localCap
		} else {
			st.label = "host " + h.label
			st.alive = h.link.alive()
		}
		for _, r := range ranks {
			// The replaced rank failed (its replacement is asked for
			// after the survivors agreed on it) but may not be reaped
			// yet: its slot is as good as free.
			if j.ranks[r].running && r != near {
				st.running++
			}
			if r == near {
				at = i
			}
		}
		states[i] = st
	}
	i, err := chooseSpareHost(states, at, j.opts.Oversubscribe)
	if err != nil {
		return nil, err
	}
	return j.hosts[i], nil
}
