package captures

import (
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// msLit renders t as a DateTime64(3, 'UTC') literal.
func msLit(t time.Time) string {
	return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d), 'UTC')", t.UnixMilli())
}

func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func lowCardinality() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }

func dateTime64ms() *proto.ColDateTime64 {
	return new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli).WithLocation(time.UTC)
}
