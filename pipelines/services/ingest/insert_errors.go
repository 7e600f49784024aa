package ingest

import (
	"errors"
	"strings"

	"github.com/spikehunt/spikehunt/internal/store"
)

// Insert errors fall in two kinds. A retryable one is about the server or
// the way to it (down, timeout, too many parts to merge, out of memory, a
// table not migrated yet, no permission yet): the same insert later may
// succeed, so the batch waits and nothing is dead-lettered. A permanent
// one is about the rows: the same rows will be refused forever, so the
// batch is split (consumer.go, bisect) until the messages whose rows the
// server refuses are found; they go to the dead-letter topic and the rest
// is inserted.
//
// Only errors known to be about the rows are permanent. An unknown one is
// retried: a stalled partition is visible (lag, /healthz, logs), rows
// dead-lettered by a misconfigured server are not.

// permanentCodes are ClickHouse error codes that say the block's data is
// unfit, by name as the server reports it.
var permanentCodes = map[int]string{
	6:   "CANNOT_PARSE_TEXT",
	27:  "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
	38:  "CANNOT_PARSE_DATE",
	41:  "CANNOT_PARSE_DATETIME",
	53:  "TYPE_MISMATCH",
	69:  "ARGUMENT_OUT_OF_BOUND",
	70:  "CANNOT_CONVERT_TYPE",
	72:  "CANNOT_PARSE_NUMBER",
	117: "INCORRECT_DATA",
	128: "TOO_LARGE_ARRAY_SIZE",
	131: "TOO_LARGE_STRING_SIZE",
	321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
	349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
	395: "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO",
	469: "VIOLATED_CONSTRAINT",
}

// codeTooManyParts is TOO_MANY_PARTS, which ClickHouse raises for two
// different things: too many active parts in a partition (merges are
// behind: retry later) and too many partitions in one insert block (the
// rows span more than max_partitions_per_insert_block days: permanent).
const codeTooManyParts = 252

// insertFailure says whether err is permanent for the rows inserted, and
// if so, the reason a dead letter carries: "too_many_partitions" or the
// code's name in lower case.
func insertFailure(err error) (reason string, permanent bool) {
	var ex *store.Exception
	if !errors.As(err, &ex) {
		return "", false
	}
	if ex.Code == codeTooManyParts {
		if strings.Contains(strings.ToLower(ex.Message), "too many partitions for single insert block") {
			return "too_many_partitions", true
		}
		return "", false
	}
	if name, ok := permanentCodes[ex.Code]; ok {
		return strings.ToLower(name), true
	}
	return "", false
}
