package policy

import (
	"fmt"
	"time"
)

// classSize is one hardware class of a test fleet.
type classSize struct {
	class string
	nodes int
}

// testFleet builds a fleet named node-0000, node-0001, … whose classes are
// interleaved by name (so that no class owns a range of names). Every other
// node carries its class in HWClass, the rest in the default label; class
// "" gets neither.
func testFleet(classes ...classSize) []Node {
	total := 0
	for _, c := range classes {
		total += c.nodes
	}
	left := make([]int, len(classes))
	for i, c := range classes {
		left[i] = c.nodes
	}
	nodes := make([]Node, 0, total)
	for i := 0; len(nodes) < total; i++ {
		c := i % len(classes)
		if left[c] == 0 {
			continue
		}
		left[c]--
		n := Node{Name: fmt.Sprintf("node-%04d", len(nodes))}
		switch cl := classes[c].class; {
		case cl == "":
		case len(nodes)%2 == 0:
			n.HWClass = cl
		default:
			n.Labels = map[string]string{DefaultHWClassLabel: cl, "kubernetes.io/os": "linux"}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// fleet1000 is the fleet: 1,000 nodes in three classes.
func fleet1000() []Node {
	return testFleet(classSize{"gen4", 700}, classSize{"gen5", 250}, classSize{"gen6", 50})
}

// at is the start of epoch e of the period, counted from the Unix epoch.
func at(e int64, period time.Duration) time.Time {
	return time.Unix(0, e*int64(period)).UTC()
}

// classesOf maps node names to their classes as Sample sees them with the
// class label label ("" for the default).
func classesOf(nodes []Node, label string) map[string]string {
	if label == "" {
		label = DefaultHWClassLabel
	}
	m := make(map[string]string, len(nodes))
	for _, n := range nodes {
		c := n.HWClass
		if c == "" {
			c = n.Labels[label]
		}
		m[n.Name] = c
	}
	return m
}
