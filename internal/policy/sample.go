package policy

import (
	"cmp"
	"slices"
	"time"
)

// Node is a node the policy may arm: one its node selector matched.
type Node struct {
	Name string
	// HWClass is the node's hardware class. When empty, the class is the
	// node's Sampling.HWClassLabel label, and without that label "" (the
	// class of unknown hardware, sampled like any other).
	HWClass string
	Labels  map[string]string
}

// Selection is the bait sample of one rotation epoch.
type Selection struct {
	// Epoch is floor(now / RotationPeriod) since the Unix epoch; always 0
	// when the sample does not rotate.
	Epoch int64
	// EpochStart and NextRotation bound the epoch; both are zero when the
	// sample does not rotate.
	EpochStart   time.Time
	NextRotation time.Time
	Nodes        []string     // the chosen nodes, sorted
	Classes      []ClassCount // every class present, sorted by class
}

// ClassCount is one hardware class in a Selection.
type ClassCount struct {
	Class  string
	Nodes  int // nodes of the class
	Chosen int // of them in the sample
}

// Sample chooses the bait of the epoch that now falls in. It is a pure
// function of its arguments: the order of nodes does not matter, and a node
// listed twice counts once (in the class that sorts first, if they differ).
//
// How, in short: the target size k (Count, or Percent rounded up) is split
// among the hardware classes, one node each first and the rest in
// proportion to class size; each class is then a shuffled deck from which
// every epoch deals the next hand. See the package documentation.
func Sample(policyUID string, nodes []Node, s Sampling, now time.Time) Selection {
	return newPlan(policyUID, nodes, s, epochOf(now, s.RotationPeriod)).selection()
}

// plan is a sampling worked out for one epoch, kept whole so that Decide
// and Widen deal from the same decks.
type plan struct {
	policy  string
	epoch   int64
	period  time.Duration
	classes []fleetClass   // sorted by name
	classOf map[string]int // node name → index in classes
}

// fleetClass is one hardware class and its deck for the epoch.
type fleetClass struct {
	name  string
	nodes []string // sorted by name
	alloc int      // bait this epoch
	// deck is the class's nodes in this cycle's dealing order; the hand
	// is alloc cards from start, wrapping around. When every node is
	// chosen, deck is nodes.
	deck  []string
	start int
}

type classedNode struct{ name, class string }

func newPlan(policy string, nodes []Node, s Sampling, epoch int64) *plan {
	label := s.classLabel()
	all := make([]classedNode, 0, len(nodes))
	for _, n := range nodes {
		c := n.HWClass
		if c == "" {
			c = n.Labels[label]
		}
		all = append(all, classedNode{n.Name, c})
	}
	slices.SortFunc(all, func(a, b classedNode) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.name, b.name))
	})
	p := &plan{policy: policy, epoch: epoch, period: s.RotationPeriod, classOf: make(map[string]int, len(all))}
	// Sorted by class first, so a node listed under two classes keeps the
	// smaller one whatever the input order.
	for _, n := range all {
		if _, dup := p.classOf[n.name]; dup {
			continue
		}
		if len(p.classes) == 0 || p.classes[len(p.classes)-1].name != n.class {
			p.classes = append(p.classes, fleetClass{name: n.class})
		}
		c := &p.classes[len(p.classes)-1]
		c.nodes = append(c.nodes, n.name)
		p.classOf[n.name] = len(p.classes) - 1
	}
	p.allocate(s.target(len(p.classOf)))
	for i := range p.classes {
		p.classes[i].shuffle(policy, epoch)
	}
	return p
}

// allocate splits k bait among the classes. With at least as many bait as
// classes, every class gets one and the split is proportional to class
// size by Hamilton's largest remainder, so within ±1 of each class's share
// when every share is at least 1; a class whose share is below 1 gets 1,
// and the rest is split among the others in proportion again. With fewer
// bait than classes, k classes get one each, dealt from a deck of classes
// like nodes are, so that every class gets bait every ceil(#classes/k)
// epochs.
func (p *plan) allocate(k int) {
	m := len(p.classes)
	switch {
	case k <= 0:
	case k >= m:
		size := make([]int, m)
		for i, c := range p.classes {
			size[i] = len(c.nodes)
		}
		for i, a := range apportion(k, size, true) {
			p.classes[i].alloc = a
		}
	default:
		names := make([]string, m)
		for i, c := range p.classes {
			names[i] = c.name
		}
		deck, start := deal(p.policy, domainClass, names, k, p.epoch)
		index := make(map[string]int, m)
		for i, c := range p.classes {
			index[c.name] = i
		}
		for i := range k {
			p.classes[index[deck[(start+i)%m]]].alloc = 1
		}
	}
}

// apportion splits k among groups of the given sizes in proportion to
// size, by largest remainder (ties: the larger group, then the lower
// index). With atLeastOne, which needs k ≥ len(size) and every size ≥ 1,
// each group whose share is below 1 gets exactly 1 and the rest is
// apportioned among the others, repeatedly. k must not exceed the sum of
// the sizes; then no group gets more than its size.
func apportion(k int, size []int, atLeastOne bool) []int {
	out := make([]int, len(size))
	free := make([]bool, len(size))
	kf, nf := k, 0
	for i, s := range size {
		free[i] = s > 0
		nf += s
	}
	for atLeastOne {
		var pinned []int
		for i, s := range size {
			if free[i] && kf*s < nf { // share kf·s/nf below 1
				pinned = append(pinned, i)
			}
		}
		if len(pinned) == 0 {
			break
		}
		// kf ≥ #free holds throughout (it starts as k ≥ #groups and both
		// drop by one per pinned group), so a round never pins every free
		// group, and a pinned group's spare nodes never exceed what the
		// others can take: kf ≤ nf holds too.
		for _, i := range pinned {
			out[i], free[i] = 1, false
			kf--
			nf -= size[i]
		}
	}
	if nf == 0 {
		return out
	}
	type remainder struct{ group, rem int }
	var rems []remainder
	left := kf
	for i, s := range size {
		if !free[i] {
			continue
		}
		out[i] = kf * s / nf
		left -= out[i]
		rems = append(rems, remainder{i, kf * s % nf})
	}
	slices.SortFunc(rems, func(a, b remainder) int {
		return cmp.Or(cmp.Compare(b.rem, a.rem), cmp.Compare(size[b.group], size[a.group]), cmp.Compare(a.group, b.group))
	})
	for _, r := range rems[:left] { // left < #free: each share is rounded up at most once
		out[r.group]++
	}
	return out
}

// shuffle lays out the class's deck for the epoch.
func (c *fleetClass) shuffle(policy string, epoch int64) {
	if c.alloc >= len(c.nodes) {
		c.deck, c.start = c.nodes, 0
		return
	}
	c.deck, c.start = deal(policy, domainNode, c.nodes, max(c.alloc, 1), epoch)
}

// hand is the class's bait this epoch, in dealing order.
func (c *fleetClass) hand() []string {
	out := make([]string, c.alloc)
	for i := range out {
		out[i] = c.deck[(c.start+i)%len(c.deck)]
	}
	return out
}

// deal treats items as a deck dealt hand cards per epoch. A cycle is the
// ceil(len/hand) epochs it takes to deal the whole deck; each cycle
// shuffles it anew by a hash of (policy, item, cycle). It returns the
// cycle's deck and where the epoch's hand starts; the last hand of a cycle
// wraps around to the deck's first cards. So within a cycle every item is
// dealt, consecutive hands are disjoint, and the next cycle is a fresh
// pseudo-random order. hand must be in [1, len(items)].
func deal(policy string, domain byte, items []string, hand int, epoch int64) (deck []string, start int) {
	n := len(items)
	cycleLen := int64((n + hand - 1) / hand)
	cycle, pos := floorDiv(epoch, cycleLen), floorMod(epoch, cycleLen)
	type card struct {
		rank uint64
		item string
	}
	cards := make([]card, n)
	for i, it := range items {
		cards[i] = card{rank(policy, domain, it, cycle), it}
	}
	slices.SortFunc(cards, func(a, b card) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.item, b.item))
	})
	deck = make([]string, n)
	for i, c := range cards {
		deck[i] = c.item
	}
	return deck, int(pos) * hand
}

// selection is the plan as Sample returns it.
func (p *plan) selection() Selection {
	sel := Selection{Epoch: p.epoch, Classes: make([]ClassCount, 0, len(p.classes))}
	if p.period > 0 {
		sel.EpochStart = epochStart(p.epoch, p.period)
		sel.NextRotation = epochStart(p.epoch+1, p.period)
	}
	for i := range p.classes {
		c := &p.classes[i]
		sel.Nodes = append(sel.Nodes, c.hand()...)
		sel.Classes = append(sel.Classes, ClassCount{Class: c.name, Nodes: len(c.nodes), Chosen: c.alloc})
	}
	slices.Sort(sel.Nodes)
	return sel
}

// epochOf is floor(now / period) counted from the Unix epoch, 0 when the
// sample does not rotate.
func epochOf(now time.Time, period time.Duration) int64 {
	if period <= 0 {
		return 0
	}
	return floorDiv(now.UnixNano(), int64(period))
}

func epochStart(epoch int64, period time.Duration) time.Time {
	return time.Unix(0, epoch*int64(period)).UTC()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// Hash domains, so that a class and a node of the same name rank apart.
const (
	domainNode  = 'n'
	domainClass = 'c'
)

// rank is FNV-1a 64 over (len(policy), policy, domain, item, cycle),
// finished with the murmur3 64-bit mixer. FNV-1a alone hardly mixes its
// last bytes into the high bits, and the cycle is the last input: without
// the mixer, two cycles would sort the nodes in nearly the same order.
func rank(policy string, domain byte, item string, cycle int64) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := range 8 {
		h = (h ^ uint64(byte(len(policy)>>(8*i)))) * prime
	}
	for i := 0; i < len(policy); i++ {
		h = (h ^ uint64(policy[i])) * prime
	}
	h = (h ^ uint64(domain)) * prime
	for i := 0; i < len(item); i++ {
		h = (h ^ uint64(item[i])) * prime
	}
	for i := range 8 {
		h = (h ^ uint64(byte(cycle>>(8*i)))) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
