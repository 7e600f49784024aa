package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSampleIsDeterministic(t *testing.T) {
	nodes := fleet1000()
	s := Sampling{Percent: 10, RotationPeriod: time.Hour}
	now := time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)
	want := Sample("uid-a", nodes, s, now)

	shuffled := slices.Clone(nodes)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	reversed := slices.Clone(nodes)
	slices.Reverse(reversed)

	for _, tc := range []struct {
		name  string
		nodes []Node
		now   time.Time
	}{
		{"the same inputs give the same sample", nodes, now},
		{"shuffled nodes give the same sample", shuffled, now},
		{"reversed nodes give the same sample", reversed, now},
		{"a node listed twice counts once", append(slices.Clone(nodes), nodes[:10]...), now},
		{"any time within the epoch gives the epoch's sample", nodes, now.Add(29*time.Minute + 59*time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(want, Sample("uid-a", tc.nodes, s, tc.now)); diff != "" {
				t.Errorf("Sample (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("another policy gets another sample of the same shape", func(t *testing.T) {
		other := Sample("uid-b", nodes, s, now)
		if slices.Equal(other.Nodes, want.Nodes) {
			t.Error("two policies chose the same nodes")
		}
		if diff := cmp.Diff(want.Classes, other.Classes); diff != "" {
			t.Errorf("per-class counts (-uid-a +uid-b):\n%s", diff)
		}
	})
	t.Run("the epoch and its bounds", func(t *testing.T) {
		wantEpoch := now.Unix() / 3600
		if want.Epoch != wantEpoch {
			t.Errorf("epoch %d, want %d", want.Epoch, wantEpoch)
		}
		if got, w := want.EpochStart, now.Truncate(time.Hour); !got.Equal(w) {
			t.Errorf("epoch start %s, want %s", got, w)
		}
		if got, w := want.NextRotation, now.Truncate(time.Hour).Add(time.Hour); !got.Equal(w) {
			t.Errorf("next rotation %s, want %s", got, w)
		}
	})
}

func TestSampleStratifiesByHardwareClass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []Node
		s     Sampling
		want  []ClassCount
	}{
		{
			name:  "10% of 700/250/50 is 70/25/5",
			nodes: fleet1000(),
			s:     Sampling{Percent: 10},
			want:  []ClassCount{{"gen4", 700, 70}, {"gen5", 250, 25}, {"gen6", 50, 5}},
		},
		{
			name:  "5% of 700/250/50: the tie between 12.5 and 2.5 goes to the larger class",
			nodes: fleet1000(),
			s:     Sampling{Percent: 5},
			want:  []ClassCount{{"gen4", 700, 35}, {"gen5", 250, 13}, {"gen6", 50, 2}},
		},
		{
			name:  "1% of 700/250/50: the smallest class's share is 0.5, it gets 1 all the same",
			nodes: fleet1000(),
			s:     Sampling{Percent: 1},
			want:  []ClassCount{{"gen4", 700, 7}, {"gen5", 250, 2}, {"gen6", 50, 1}},
		},
		{
			name:  "a count of 3 gives each of 3 classes one",
			nodes: fleet1000(),
			s:     Sampling{Count: 3},
			want:  []ClassCount{{"gen4", 700, 1}, {"gen5", 250, 1}, {"gen6", 50, 1}},
		},
		{
			name:  "nodes without a class are class \"\", sampled like any other",
			nodes: testFleet(classSize{"gen4", 600}, classSize{"gen5", 300}, classSize{"gen6", 90}, classSize{"", 10}),
			s:     Sampling{Percent: 10},
			want:  []ClassCount{{"", 10, 1}, {"gen4", 600, 60}, {"gen5", 300, 30}, {"gen6", 90, 9}},
		},
		{
			name:  "a class of one node among a thousand still gets bait",
			nodes: testFleet(classSize{"big", 999}, classSize{"lone", 1}),
			s:     Sampling{Count: 10},
			want:  []ClassCount{{"big", 999, 9}, {"lone", 1, 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := Sample("uid", tc.nodes, tc.s, time.Unix(0, 0))
			if diff := cmp.Diff(tc.want, sel.Classes); diff != "" {
				t.Errorf("per-class counts (-want +got):\n%s", diff)
			}
			checkClassCounts(t, tc.nodes, "", sel)
		})
	}
}

// TestSampleSharesAreProportional checks the allocation over every percent
// on the fleet and on a fleet of 13 uneven classes: the total is
// the target, every class gets bait when there is enough for one each, and
// when every class's share k·n/N is at least 1, each class is within ±1 of
// it (largest remainder never rounds a share by a whole node).
func TestSampleSharesAreProportional(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var uneven []classSize
	for i := range 13 {
		uneven = append(uneven, classSize{fmt.Sprintf("c%02d", i), 1 + r.IntN(400)})
	}
	for name, nodes := range map[string][]Node{"700/250/50": fleet1000(), "13 uneven classes": testFleet(uneven...)} {
		for pct := 1; pct <= 100; pct++ {
			sel := Sample("uid", nodes, Sampling{Percent: pct}, time.Unix(0, 0))
			n := len(nodes)
			k := int(math.Ceil(float64(n) * float64(pct) / 100))
			if len(sel.Nodes) != k {
				t.Errorf("%s at %d%%: %d nodes, want %d", name, pct, len(sel.Nodes), k)
			}
			allShares := true
			for _, c := range sel.Classes {
				allShares = allShares && float64(k*c.Nodes)/float64(n) >= 1
			}
			for _, c := range sel.Classes {
				share := float64(k*c.Nodes) / float64(n)
				switch {
				case c.Chosen < 1 && k >= len(sel.Classes):
					t.Errorf("%s at %d%%: class %s got no bait", name, pct, c.Class)
				case c.Chosen > c.Nodes:
					t.Errorf("%s at %d%%: class %s got %d of %d nodes", name, pct, c.Class, c.Chosen, c.Nodes)
				case allShares && math.Abs(float64(c.Chosen)-share) >= 1:
					t.Errorf("%s at %d%%: class %s got %d, its share is %.2f", name, pct, c.Class, c.Chosen, share)
				}
			}
			checkClassCounts(t, nodes, "", sel)
		}
	}
}

// checkClassCounts checks that Selection.Classes agrees with the nodes it
// lists, which are sorted and distinct.
func checkClassCounts(t *testing.T, nodes []Node, label string, sel Selection) {
	t.Helper()
	if !slices.IsSorted(sel.Nodes) || len(slices.Compact(slices.Clone(sel.Nodes))) != len(sel.Nodes) {
		t.Errorf("nodes not sorted and distinct: %v", sel.Nodes)
	}
	classOf := classesOf(nodes, label)
	got := map[string]int{}
	for _, n := range sel.Nodes {
		got[classOf[n]]++
	}
	for _, c := range sel.Classes {
		if got[c.Class] != c.Chosen {
			t.Errorf("class %q: %d chosen nodes listed, Classes says %d", c.Class, got[c.Class], c.Chosen)
		}
	}
}

func TestSampleRotates(t *testing.T) {
	nodes := fleet1000()
	const period = time.Hour
	for _, pct := range []int{1, 2, 5, 10, 20, 50} {
		t.Run(fmt.Sprintf("%d%%", pct), func(t *testing.T) {
			s := Sampling{Percent: pct, RotationPeriod: period}
			K := (100 + pct - 1) / pct // epochs a fraction pct needs to reach everyone once
			const starts = 60
			sels := make([]Selection, starts+K)
			for e := range sels {
				sels[e] = Sample("uid", nodes, s, at(int64(e), period))
			}
			f := float64(pct) / 100

			// Consecutive samples differ. Within a class's cycle they
			// are disjoint; across cycles they are two independent
			// draws, which share a fraction f on average.
			for e := 0; e+1 < len(sels); e++ {
				shared := overlap(sels[e].Nodes, sels[e+1].Nodes)
				if shared == len(sels[e].Nodes) {
					t.Fatalf("epochs %d and %d chose the same nodes", e, e+1)
				}
				if frac := float64(shared) / float64(len(sels[e].Nodes)); frac > f+0.15 {
					t.Errorf("epochs %d and %d share %.0f%% of their nodes, want ≤ %.0f%%", e, e+1, 100*frac, 100*(f+0.15))
				}
			}

			// Epoch 0 starts a cycle in every class. Over K epochs a
			// class of n nodes dealing a per epoch covers exactly
			// min(n, K·a) nodes: no node repeats within a cycle. With
			// a > k·n/N − 1 (largest remainder) and K·k ≥ N, a class
			// misses fewer than K nodes, so the fleet coverage is above
			// 1 − #classes·K/N; in practice it is about 1.
			aligned := coverage(sels[:K])
			exact := 0
			for _, c := range sels[0].Classes {
				exact += min(c.Nodes, K*c.Chosen)
			}
			if want := float64(exact) / float64(len(nodes)); aligned != want {
				t.Errorf("coverage of epochs [0, %d) %.3f, want exactly %.3f", K, aligned, want)
			}
			if aligned < 0.95 {
				t.Errorf("coverage of epochs [0, %d) %.3f, want ≥ 0.95", K, aligned)
			}

			// A whole cycle of every class reaches every node.
			full := 0
			for _, c := range sels[0].Classes {
				full = max(full, (c.Nodes+c.Chosen-1)/c.Chosen)
			}
			if full > len(sels) {
				t.Fatalf("the longest cycle (%d epochs) is longer than the test's %d epochs", full, len(sels))
			}
			if got := coverage(sels[:full]); got != 1 {
				t.Errorf("coverage of the longest cycle, epochs [0, %d): %.3f, want 1", full, got)
			}

			// Any K consecutive epochs: the tail of one cycle (a share x
			// of a class) and the head of the next (1 − x), drawn
			// independently, cover 1 − x(1 − x) ≥ 75% in expectation,
			// 1 − 1/6 ≈ 83% on average over x. Independent draws every
			// epoch would cover 1 − (1 − f)^K ≈ 63–65%. The minimum
			// over 60 windows sits a few standard deviations below 75%.
			worst, sum := 1.0, 0.0
			for e := range starts {
				c := coverage(sels[e : e+K])
				worst = min(worst, c)
				sum += c
			}
			mean := sum / starts
			t.Logf("K=%d aligned %.3f, any K epochs: worst %.3f mean %.3f (independent draws: %.3f)", K, aligned, worst, mean, 1-math.Pow(1-f, float64(K)))
			if worst < 0.70 || mean < 0.80 {
				t.Errorf("coverage of any %d consecutive epochs: worst %.3f (want ≥ 0.70), mean %.3f (want ≥ 0.80)", K, worst, mean)
			}
		})
	}

	t.Run("without a rotation period the sample never changes", func(t *testing.T) {
		s := Sampling{Percent: 10}
		first := Sample("uid", nodes, s, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		later := Sample("uid", nodes, s, time.Date(2031, 7, 9, 3, 0, 0, 0, time.UTC))
		if diff := cmp.Diff(first, later); diff != "" {
			t.Errorf("Sample six years later (-first +later):\n%s", diff)
		}
		if first.Epoch != 0 || !first.EpochStart.IsZero() || !first.NextRotation.IsZero() {
			t.Errorf("epoch %d from %s to %s, want 0 and zero times", first.Epoch, first.EpochStart, first.NextRotation)
		}
	})

	t.Run("fewer bait than classes take turns across the classes", func(t *testing.T) {
		s := Sampling{Count: 2, RotationPeriod: period}
		classOf := classesOf(nodes, "")
		seen := map[string]bool{}
		for e := range int64(2) { // ceil(3 classes / 2) epochs: a cycle of the class deck
			sel := Sample("uid", nodes, s, at(e, period))
			if len(sel.Nodes) != 2 || classOf[sel.Nodes[0]] == classOf[sel.Nodes[1]] {
				t.Errorf("epoch %d: %v, want 2 nodes of distinct classes", e, sel.Nodes)
			}
			for _, n := range sel.Nodes {
				seen[classOf[n]] = true
			}
		}
		if len(seen) != 3 {
			t.Errorf("classes baited in one cycle: %v, want all 3", seen)
		}
	})
}

func overlap(a, b []string) int {
	in := make(map[string]bool, len(a))
	for _, n := range a {
		in[n] = true
	}
	shared := 0
	for _, n := range b {
		if in[n] {
			shared++
		}
	}
	return shared
}

// coverage is the share of fleet1000 that had bait in any of the samples.
func coverage(sels []Selection) float64 {
	seen := map[string]bool{}
	for _, s := range sels {
		for _, n := range s.Nodes {
			seen[n] = true
		}
	}
	return float64(len(seen)) / 1000
}

func TestSampleSizes(t *testing.T) {
	small := testFleet(classSize{"gen4", 3}, classSize{"gen5", 2})
	all := []string{"node-0000", "node-0001", "node-0002", "node-0003", "node-0004"}
	period := time.Hour
	for _, tc := range []struct {
		name  string
		nodes []Node
		s     Sampling
		now   time.Time
		want  Selection
		// which nodes is up to the hash; only their number is checked
		anyNodes bool
	}{
		{
			name: "no nodes, no bait",
			s:    Sampling{Percent: 10, RotationPeriod: period},
			now:  at(7, period),
			want: Selection{Epoch: 7, EpochStart: at(7, period), NextRotation: at(8, period)},
		},
		{
			name:  "percent 0 chooses nothing and still counts the classes",
			nodes: small,
			s:     Sampling{},
			want:  Selection{Classes: []ClassCount{{"gen4", 3, 0}, {"gen5", 2, 0}}},
		},
		{
			name:  "percent 100 chooses every node",
			nodes: small,
			s:     Sampling{Percent: 100},
			want:  Selection{Nodes: all, Classes: []ClassCount{{"gen4", 3, 3}, {"gen5", 2, 2}}},
		},
		{
			name:  "a count above the fleet chooses every node",
			nodes: small,
			s:     Sampling{Count: 50},
			want:  Selection{Nodes: all, Classes: []ClassCount{{"gen4", 3, 3}, {"gen5", 2, 2}}},
		},
		{
			name:     "a percent rounds up: 1% of 50 nodes is 1",
			nodes:    testFleet(classSize{"gen4", 50}),
			s:        Sampling{Percent: 1, RotationPeriod: period},
			now:      at(0, period),
			want:     Selection{EpochStart: at(0, period), NextRotation: at(1, period), Classes: []ClassCount{{"gen4", 50, 1}}},
			anyNodes: true,
		},
		{
			name:  "a time before 1970 is a negative epoch",
			nodes: small,
			s:     Sampling{Percent: 100, RotationPeriod: period},
			now:   time.Unix(-1, 0),
			want: Selection{
				Epoch: -1, EpochStart: at(-1, period), NextRotation: at(0, period),
				Nodes: all, Classes: []ClassCount{{"gen4", 3, 3}, {"gen5", 2, 2}},
			},
		},
		{
			name: "HWClass wins over the label, and the label is configurable",
			nodes: []Node{
				{Name: "a", HWClass: "gen4", Labels: map[string]string{"hw": "gen9"}},
				{Name: "b", Labels: map[string]string{"hw": "gen9", DefaultHWClassLabel: "gen4"}},
				{Name: "c"},
			},
			s:    Sampling{Percent: 100, HWClassLabel: "hw"},
			want: Selection{Nodes: []string{"a", "b", "c"}, Classes: []ClassCount{{"", 1, 1}, {"gen4", 1, 1}, {"gen9", 1, 1}}},
		},
		{
			name:     "one class",
			nodes:    testFleet(classSize{"gen4", 100}),
			s:        Sampling{Count: 7},
			want:     Selection{Classes: []ClassCount{{"gen4", 100, 7}}},
			anyNodes: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Sample("uid", tc.nodes, tc.s, tc.now)
			opts := []cmp.Option{cmpopts.EquateEmpty()}
			if tc.anyNodes {
				opts = append(opts, cmpopts.IgnoreFields(Selection{}, "Nodes"))
			}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("Sample (-want +got):\n%s", diff)
			}
			checkClassCounts(t, tc.nodes, tc.s.HWClassLabel, got)
		})
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		k          int
		size       []int
		atLeastOne bool
		want       []int
	}{
		{"exact shares", 10, []int{70, 20, 10}, false, []int{7, 2, 1}},
		{"the largest remainder gets the spare", 10, []int{55, 25, 20}, false, []int{6, 2, 2}},
		{"equal remainders: the larger group first", 5, []int{30, 10, 10}, false, []int{3, 1, 1}},
		{"equal remainders and sizes: the lower index first", 1, []int{10, 10}, false, []int{1, 0}},
		{"without the minimum a small group may get nothing", 10, []int{990, 5, 5}, false, []int{10, 0, 0}},
		{"with it the small groups get one each", 10, []int{990, 5, 5}, true, []int{8, 1, 1}},
		{"pinning repeats until every share is at least 1", 5, []int{100, 30, 5}, true, []int{3, 1, 1}},
		{"all of it", 6, []int{3, 2, 1}, true, []int{3, 2, 1}},
		{"empty groups get nothing", 4, []int{0, 4, 0}, false, []int{0, 4, 0}},
		{"nothing to split", 0, []int{5, 5}, false, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, apportion(tc.k, tc.size, tc.atLeastOne)); diff != "" {
				t.Errorf("apportion(%d, %v) (-want +got):\n%s", tc.k, tc.size, diff)
			}
		})
	}
}
