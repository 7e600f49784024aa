package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/chpool"
	"github.com/ClickHouse/ch-go/proto"
)

// NativeServer is a ClickHouse server over the native TCP protocol (ch-go),
// with a connection pool.
type NativeServer struct {
	pool *chpool.Pool
	addr string
}

func openNative(ctx context.Context, d DSN) (*NativeServer, error) {
	opt := ch.Options{
		Address: d.Address, Database: d.Database, User: d.User, Password: d.Password,
		TLS: d.TLS, DialTimeout: d.DialTimeout,
	}
	if opt.User == "" {
		opt.User = "default"
	}
	if opt.Database == "" {
		opt.Database = "default"
	}
	if d.Compress {
		opt.Compression = ch.CompressionLZ4
	}
	conns := int32(d.Connections)
	if conns == 0 {
		conns = 8
	}
	dctx, cancel := context.WithTimeout(ctx, d.DialTimeout)
	defer cancel()
	pool, err := chpool.Dial(dctx, chpool.Options{ClientOptions: opt, MaxConns: conns})
	if err != nil {
		return nil, fmt.Errorf("connect to ClickHouse at clickhouse://%s: %w", d.Address, nativeErr(err))
	}
	return &NativeServer{pool: pool, addr: d.Address}, nil
}

// Backend implements Store.
func (s *NativeServer) Backend() string { return "native" }

// Close implements Store.
func (s *NativeServer) Close() error {
	s.pool.Close()
	return nil
}

func chSettings(o stmtOptions) []ch.Setting {
	var out []ch.Setting
	for _, st := range o.settings {
		out = append(out, ch.Setting{Key: st.key, Value: st.value, Important: true})
	}
	return out
}

// Exec implements Store.
func (s *NativeServer) Exec(ctx context.Context, query string, opts ...Option) error {
	o := collect(opts)
	return nativeErr(s.pool.Do(ctx, ch.Query{Body: query, Settings: chSettings(o), QueryID: o.queryID}))
}

// Insert implements Store.
func (s *NativeServer) Insert(ctx context.Context, table string, cols proto.Input, opts ...Option) error {
	o := collect(opts)
	return nativeErr(s.pool.Do(ctx, ch.Query{Body: insertInto(table, cols) + " VALUES", Input: cols, Settings: chSettings(o), QueryID: o.queryID}))
}

// Query implements Store.
func (s *NativeServer) Query(ctx context.Context, query string, fn func(Block) error, opts ...Option) error {
	o := collect(opts)
	var res proto.Results
	return nativeErr(s.pool.Do(ctx, ch.Query{
		Body: query, Settings: chSettings(o), QueryID: o.queryID,
		Result: res.Auto(),
		OnResult: func(ctx context.Context, b proto.Block) error {
			blk := Block{Rows: b.Rows}
			for _, c := range res {
				blk.Names = append(blk.Names, c.Name)
				blk.Types = append(blk.Types, string(c.Data.Type()))
				blk.Columns = append(blk.Columns, c.Data)
			}
			return fn(blk)
		},
	}))
}

// nativeErr turns ch-go's exception into the package's Exception.
func nativeErr(err error) error {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return &Exception{Code: int(ex.Code), Name: ex.Name, Message: ex.Message}
	}
	return err
}
