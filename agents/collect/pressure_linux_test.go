package collect

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePressure(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want psiTotals
	}{
		{
			name: "some and full totals are read, the averages ignored",
			in:   "some avg10=0.09 avg60=1.27 avg300=13.92 total=1108800584\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
			want: psiTotals{someUs: 1108800584, fullUs: 7, hasSome: true, hasFull: true},
		},
		{
			name: "cpu before 5.13 has only some",
			in:   "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n",
			want: psiTotals{someUs: 42, hasSome: true},
		},
		{
			name: "irq has only full",
			in:   "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
			want: psiTotals{fullUs: 5, hasFull: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePressure([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(psiTotals{})); diff != "" {
				t.Errorf("parsePressure (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePressureRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"an empty file", ""},
		{"a line without total", "some avg10=0.00 avg60=0.00 avg300=0.00\n"},
		{"an unknown kind", "most avg10=0.00 total=1\n"},
		{"a total that is not a number", "some total=1.5\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parsePressure([]byte(tt.in)); !errors.Is(err, errMalformed) {
				t.Errorf("parsePressure(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParsePressureOnRealFiles(t *testing.T) {
	for _, res := range []string{"cpu", "memory", "io"} {
		b, err := os.ReadFile("testdata/real/proc/pressure/" + res)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parsePressure(b); err != nil || !got.hasSome || !got.hasFull {
			t.Errorf("parsePressure(%s) = %+v, %v; want some and full", res, got, err)
		}
	}
}
