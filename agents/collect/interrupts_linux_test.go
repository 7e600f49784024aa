package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseInterrupts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want interruptsSnapshot
	}{
		{
			name: "x86 MSI-X queues, a described IPI and the global ERR and MIS lines",
			in: "           CPU0       CPU1\n" +
				"  38:          0      30516 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n" +
				"  64:        100          0  IR-PCI-MSI 524288-edge      eth0-TxRx-3\n" +
				" LOC:    2407528    2317466   Local timer interrupts\n" +
				" ERR:          0\n" +
				" MIS:          5\n",
			want: interruptsSnapshot{cpus: []int{0, 1}, irqs: []irqLine{
				{irq: "38", device: "virtio2-input.0", counts: []uint64{0, 30516}},
				{irq: "64", device: "eth0-TxRx-3", counts: []uint64{100, 0}},
				{irq: "LOC", device: "Local timer interrupts", counts: []uint64{2407528, 2317466}},
				{irq: "ERR", counts: []uint64{0}, global: true},
				{irq: "MIS", counts: []uint64{5}, global: true},
			}},
		},
		{
			name: "arm64 GIC lines with a level column, and IPIs by number",
			in: "           CPU0       CPU1\n" +
				" 11:      12345      67890     GICv3  27 Level     arch_timer\n" +
				" 50:          1          2     GICv3  97 Edge      eth0-rx-0\n" +
				"IPI0:       999        888       Rescheduling interrupts\n" +
				"Err:          0\n",
			want: interruptsSnapshot{cpus: []int{0, 1}, irqs: []irqLine{
				{irq: "11", device: "arch_timer", counts: []uint64{12345, 67890}},
				{irq: "50", device: "eth0-rx-0", counts: []uint64{1, 2}},
				{irq: "IPI0", device: "Rescheduling interrupts", counts: []uint64{999, 888}},
				{irq: "Err", counts: []uint64{0}, global: true},
			}},
		},
		{
			name: "a shared IRQ, a device name with blanks, xen flow names and an IRQ without handler",
			in: "           CPU0\n" +
				"  16:          5   IO-APIC  16-fasteoi   ehci_hcd:usb1, uhci_hcd:usb2\n" +
				"  40:          6  PCI-MSI 1048576-edge      iwlwifi: default queue\n" +
				"  70:          7  xen-percpu    -virq      timer0\n" +
				"  71:          8  xen-pirq -ioapic-level  ata_piix\n" +
				"  99:          9  IO-APIC   3-edge\n",
			want: interruptsSnapshot{cpus: []int{0}, irqs: []irqLine{
				{irq: "16", device: "ehci_hcd:usb1, uhci_hcd:usb2", counts: []uint64{5}},
				{irq: "40", device: "iwlwifi: default queue", counts: []uint64{6}},
				{irq: "70", device: "timer0", counts: []uint64{7}},
				{irq: "71", device: "ata_piix", counts: []uint64{8}},
				{irq: "99", counts: []uint64{9}},
			}},
		},
		{
			name: "an old kernel's chip-and-flow column and a CPU taken offline",
			in: "           CPU0       CPU2\n" +
				"   0:         44          3   IO-APIC-edge      timer\n",
			want: interruptsSnapshot{cpus: []int{0, 2}, irqs: []irqLine{
				{irq: "0", device: "timer", counts: []uint64{44, 3}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseInterrupts([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(interruptsSnapshot{}, irqLine{})); diff != "" {
				t.Errorf("parseInterrupts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseInterruptsRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"a header that names no CPU", "  0: 1 2 IO-APIC timer\n"},
		{"two counts for four CPUs", "CPU0 CPU1 CPU2 CPU3\n 24: 1 2 IO-APIC 5-edge x\n"},
		{"no count at all", "CPU0 CPU1\n 24: IO-APIC 5-edge x\n"},
		{"an IRQ name without its colon", "CPU0\n 24 1 IO-APIC\n"},
		{"a lone colon", "CPU0\n : 1\n"},
		{"a count beyond 64 bits", "CPU0\n 24: 99999999999999999999 IO-APIC\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseInterrupts([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parseInterrupts(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseInterruptsOnRealFile(t *testing.T) {
	b, err := os.ReadFile("testdata/real/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseInterrupts(b)
	if err != nil {
		t.Fatal(err)
	}
	byIRQ := map[string]irqLine{}
	for _, l := range got.irqs {
		byIRQ[l.irq] = l
	}
	want := map[string]irqLine{
		"24":  {irq: "24", device: "ACPI:Ged", counts: []uint64{1, 0}},
		"38":  {irq: "38", device: "virtio2-input.0", counts: []uint64{0, 30597}},
		"NMI": {irq: "NMI", device: "Non-maskable interrupts", counts: []uint64{0, 0}},
		"ERR": {irq: "ERR", counts: []uint64{0}, global: true},
		"MIS": {irq: "MIS", counts: []uint64{0}, global: true},
	}
	for irq, w := range want {
		if diff := cmp.Diff(w, byIRQ[irq], cmp.AllowUnexported(irqLine{})); diff != "" {
			t.Errorf("IRQ %s (-want +got):\n%s", irq, diff)
		}
	}
	if n := len(got.irqs); n != 35 {
		t.Errorf("got %d IRQ lines, want 35", n)
	}
}
